"""Finding the cluster: in-cluster first, then merged kubeconfig files, with clear errors."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from kdraexp.kube.kubeconfig import ConfigError, load, redacted


def write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document))
    path.chmod(0o600)
    return path


NO_CLUSTER = {"KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""}


def kubeconfig(
    server: str = "https://api.example:6443",
    user: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, **(cluster or {})}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "scraper"}}],
        "users": [{"name": "scraper", "user": user or {"token": "t"}}],
    }


def test_merged_kubeconfig(tmp_path: Path) -> None:
    """The original's case: cluster and context in one file, the user's token in another."""
    cluster = write(
        tmp_path / "cluster.yaml",
        {
            "clusters": [{"name": "test", "cluster": {"server": "https://api.example:6443"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "scraper"}}],
            "current-context": "test",
        },
    )
    user = write(
        tmp_path / "user.yaml", {"users": [{"name": "scraper", "user": {"token": "test-token"}}]}
    )
    config = load({**NO_CLUSTER, "KUBECONFIG": f"{cluster}{os.pathsep}{user}"}, home=str(tmp_path))
    assert config.server == "https://api.example:6443"
    assert config.token == "test-token"


def test_first_definition_wins(tmp_path: Path) -> None:
    """Names and current-context come from the first file that sets them; entries are not mixed."""
    first = write(
        tmp_path / "a",
        {"current-context": "a", "users": [{"name": "scraper", "user": {"token": "first"}}]},
    )
    second = write(
        tmp_path / "b",
        {
            **kubeconfig(),
            "current-context": "test",
            "contexts": [{"name": "a", "context": {"cluster": "test", "user": "scraper"}}],
        },
    )
    env = {
        "KUBECONFIG": os.pathsep.join(
            ["", str(tmp_path / "missing"), str(first), str(second), str(first)]
        )
    }
    config = load(env, home=str(tmp_path))
    assert config.token == "first"
    assert config.origin == f"kubeconfig {first} context a"


def test_relative_paths_resolve_against_their_file(tmp_path: Path) -> None:
    """Certificate and token file paths are relative to the kubeconfig naming them."""
    (tmp_path / "certs").mkdir()
    ca = trustme.CA().cert_pem.bytes()
    (tmp_path / "certs" / "ca.pem").write_bytes(ca)
    (tmp_path / "certs" / "token").write_text("from-file")
    path = write(
        tmp_path / "config",
        kubeconfig(
            user={"tokenFile": "certs/token"}, cluster={"certificate-authority": "certs/ca.pem"}
        ),
    )
    config = load({"KUBECONFIG": str(path)}, home="/nonexistent")
    assert config.ca_pem == ca
    assert config.token_file == str(tmp_path / "certs" / "token")


def test_data_fields(tmp_path: Path) -> None:
    """-data fields are base64; tls-server-name and insecure are read."""
    b64 = base64.b64encode(b"PEM").decode()
    ca = trustme.CA().cert_pem.bytes()
    path = write(
        tmp_path / "config",
        kubeconfig(
            user={"client-certificate-data": b64, "client-key-data": b64},
            cluster={
                "certificate-authority-data": base64.b64encode(ca).decode(),
                "tls-server-name": "kubernetes",
            },
        ),
    )
    config = load({"KUBECONFIG": str(path)})
    assert (config.ca_pem, config.client_cert_pem, config.client_key_pem) == (ca, b"PEM", b"PEM")
    assert config.tls_server_name == "kubernetes"


def test_home_default(tmp_path: Path) -> None:
    """Without KUBECONFIG (or with it empty), ~/.kube/config is read."""
    (tmp_path / ".kube").mkdir()
    write(tmp_path / ".kube" / "config", kubeconfig())
    assert load({"KUBECONFIG": ""}, home=str(tmp_path)).server == "https://api.example:6443"


def test_in_cluster(tmp_path: Path) -> None:
    """Both variables set, token readable: in-cluster, IPv6 in brackets, token kept as a file."""
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(b"CA")
    config = load(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
        serviceaccount_dir=str(tmp_path),
    )
    assert config.server == "https://[fd00::1]:443"
    assert config.token_file == str(tmp_path / "token")
    assert config.ca_pem == b"CA"
    assert config.origin == "in-cluster"


def test_in_cluster_without_ca_warns(tmp_path: Path) -> None:
    """A missing ca.crt falls back to the system roots, with a warning."""
    (tmp_path / "token").write_text("sa-token")
    config = load(
        {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
        serviceaccount_dir=str(tmp_path),
    )
    assert config.ca_pem is None
    assert "trusting the system roots" in config.warnings[0]


def test_in_cluster_without_token_falls_back(tmp_path: Path) -> None:
    """An unreadable token means not in-cluster: kubeconfig is used instead."""
    path = write(tmp_path / "config", kubeconfig())
    config = load(
        {
            "KUBERNETES_SERVICE_HOST": "10.0.0.1",
            "KUBERNETES_SERVICE_PORT": "443",
            "KUBECONFIG": str(path),
        },
        serviceaccount_dir=str(tmp_path / "none"),
    )
    assert config.origin.startswith("kubeconfig")


def test_nothing_usable_says_what_was_tried(tmp_path: Path) -> None:
    """No configuration: one message naming every place tried."""
    with pytest.raises(ConfigError) as caught:
        load({}, home=str(tmp_path), serviceaccount_dir=str(tmp_path))
    message = str(caught.value)
    assert "in-cluster (KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set)" in message
    assert "~/.kube/config (not found)" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({**kubeconfig(), "current-context": "nope"}, "context 'nope' is not defined"),
        (kubeconfig(cluster={"proxy-url": "http://proxy:3128"}), "proxy-url"),
        (kubeconfig(user={"auth-provider": {"name": "oidc"}}), "auth-provider"),
        (
            kubeconfig(
                cluster={"insecure-skip-tls-verify": True, "certificate-authority-data": "QQ=="}
            ),
            "insecure flag is not allowed",
        ),
        (kubeconfig(user={"token": "t", "username": "u", "password": "p"}), "not both"),
        (kubeconfig(user={"client-certificate-data": "QQ=="}), "must be given together"),
        (kubeconfig(cluster={"certificate-authority-data": "!!"}), "not valid base64"),
        (
            kubeconfig(cluster={"certificate-authority": "/no/such/file"}),
            "cannot read certificate-authority",
        ),
        (kubeconfig(server="api.example:6443"), "is not an http(s) URL"),
        (
            kubeconfig(
                user={
                    "exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1alpha1"}
                }
            ),
            "v1alpha1",
        ),
        (
            kubeconfig(
                user={
                    "exec": {
                        "command": "x",
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "interactiveMode": "Always",
                    }
                }
            ),
            "interactive",
        ),
        ({"clusters": "nope", "current-context": "x"}, "clusters must be a list"),
    ],
)
def test_bad_kubeconfigs(tmp_path: Path, document: dict[str, Any], message: str) -> None:
    """Each unusable kubeconfig gets an error that says what is wrong and where."""
    path = write(tmp_path / "config", document)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load({"KUBECONFIG": str(path)})


@pytest.mark.parametrize("text", ["{{{", "- just\n- a list\n", "\x00\x01"])
def test_unparseable_kubeconfig(tmp_path: Path, text: str) -> None:
    """Garbage files name the file."""
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path)):
        load({"KUBECONFIG": str(path)})


def test_exec_config(tmp_path: Path) -> None:
    """exec plugins: relative commands resolve against the file, env and args are kept."""
    path = write(
        tmp_path / "config",
        kubeconfig(
            user={
                "exec": {
                    "command": "./bin/creds",
                    "args": ["get"],
                    "env": [{"name": "A", "value": "1"}],
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "provideClusterInfo": True,
                }
            }
        ),
    )
    config = load({"KUBECONFIG": str(path)})
    assert config.exec is not None
    assert config.exec.command == str(tmp_path / "bin" / "creds")
    assert (config.exec.args, config.exec.env, config.exec.provide_cluster_info) == (
        ("get",),
        (("A", "1"),),
        True,
    )


def test_https_proxy_warned(tmp_path: Path) -> None:
    """An HTTPS proxy variable is not used, and the exporter says so."""
    path = write(tmp_path / "config", kubeconfig())
    config = load({"KUBECONFIG": str(path), "HTTPS_PROXY": "http://proxy:3128"})
    assert config.warnings == ("HTTPS_PROXY is set but not used: kdraexp connects directly",)


def test_secrets_not_in_repr(tmp_path: Path) -> None:
    """Tokens, passwords and keys never show in the config's repr (and so in logs)."""
    path = write(tmp_path / "config", kubeconfig(user={"username": "u", "password": "hunter2"}))
    assert "hunter2" not in repr(load({"KUBECONFIG": str(path)}))
    path = write(tmp_path / "config", kubeconfig(user={"token": "s3cret"}))
    assert "s3cret" not in repr(load({"KUBECONFIG": str(path)}))


@pytest.mark.parametrize("flag", ["false", "no", "0", "true", 1])
def test_insecure_flag_must_be_a_boolean(tmp_path: Path, flag: object) -> None:
    """insecure-skip-tls-verify: "false" (a string) once turned verification off; refused now."""
    path = write(tmp_path / "config", kubeconfig(cluster={"insecure-skip-tls-verify": flag}))
    with pytest.raises(ConfigError, match="insecure-skip-tls-verify must be true or false"):
        load({**NO_CLUSTER, "KUBECONFIG": str(path)})
    plugin = {
        "command": "x",
        "apiVersion": "client.authentication.k8s.io/v1",
        "provideClusterInfo": flag,
    }
    path = write(tmp_path / "config", kubeconfig(user={"exec": plugin}))
    with pytest.raises(ConfigError, match="provideClusterInfo must be true or false"):
        load({**NO_CLUSTER, "KUBECONFIG": str(path)})


def test_insecure_flag_booleans(tmp_path: Path) -> None:
    """Real YAML booleans are taken."""
    for flag in (True, False):
        path = write(tmp_path / "config", kubeconfig(cluster={"insecure-skip-tls-verify": flag}))
        assert load({**NO_CLUSTER, "KUBECONFIG": str(path)}).insecure is flag


def test_yaml_errors_do_not_echo_the_file(tmp_path: Path) -> None:
    """A YAML error says where, never what: the offending line may hold a token."""
    path = tmp_path / "config"
    path.write_text('users:\n- name: x\n  user:\n    token: "s3cr3t-t0ken\n')
    with pytest.raises(ConfigError) as caught:
        load({**NO_CLUSTER, "KUBECONFIG": str(path)})
    assert "s3cr3t" not in str(caught.value)
    assert "line 4" in str(caught.value) or "line 5" in str(caught.value)


@pytest.mark.parametrize(
    "server",
    ["https://[::1", "https://", "https://ho st:6443", "https://api.example:99999"],
)
def test_unusable_server_is_one_line(tmp_path: Path, server: str) -> None:
    """A server that is not a URL is a configuration error, not a traceback."""
    path = write(tmp_path / "config", kubeconfig(server=server))
    with pytest.raises(ConfigError, match="is not a URL"):
        load({**NO_CLUSTER, "KUBECONFIG": str(path)})


def test_passwords_in_server_urls_are_not_logged() -> None:
    """The origin logged at startup carries no password."""
    assert redacted("https://admin:hunter2@api.example:6443/") == "https://api.example:6443/"
    assert redacted("https://api.example:6443") == "https://api.example:6443"


def test_plain_http_with_credentials_warns(tmp_path: Path) -> None:
    """An http:// server sends the token in clear: said at startup."""
    path = write(tmp_path / "config", kubeconfig(server="http://api.example:8080"))
    config = load({**NO_CLUSTER, "KUBECONFIG": str(path)})
    assert any("unencrypted" in warning for warning in config.warnings)


def test_certificate_data_must_be_a_string(tmp_path: Path) -> None:
    """Non-string certificate data: a configuration error naming the field."""
    path = write(tmp_path / "config", kubeconfig(cluster={"certificate-authority-data": 12345}))
    with pytest.raises(ConfigError, match="certificate-authority-data must be a base64 string"):
        load({**NO_CLUSTER, "KUBECONFIG": str(path)})


def test_fifo_kubeconfig_does_not_block(tmp_path: Path) -> None:
    """A FIFO named as a kubeconfig is refused at once instead of blocking startup."""
    path = tmp_path / "config"
    os.mkfifo(path)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load({**NO_CLUSTER, "KUBECONFIG": str(path)})


@pytest.mark.parametrize("field", ["certificate-authority-data", "certificate-authority"])
def test_certificate_authority_not_pem(tmp_path: Path, field: str) -> None:
    """Base64 that is no PEM (or a file that is none): the cluster and the file are named."""
    ca = tmp_path / "ca.der"
    ca.write_bytes(b"0\x82 not a certificate")
    if field == "certificate-authority":
        value, where = str(ca), f"certificate-authority {ca}"
    else:
        value, where = "MIIBIjANBgkqhkiG", f"certificate-authority-data in {tmp_path / 'config'}"
    path = write(tmp_path / "config", kubeconfig(cluster={field: value}))
    with pytest.raises(ConfigError) as caught:
        load({**NO_CLUSTER, "KUBECONFIG": str(path)})
    assert str(caught.value) == (
        f"kubeconfig cluster 'test': {where}: the certificate authority holds no PEM certificate"
    )
