"""Where the cluster is and how to trust and authenticate to it, as client-go decides.

In-cluster first (``KUBERNETES_SERVICE_HOST``/``PORT`` and the ServiceAccount files), otherwise
the kubeconfig files named by ``KUBECONFIG`` (merged, first definition wins) or
``~/.kube/config``.  Pure: reads files, talks to nothing.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml
from hyperlink import DecodedURL

from kdraexp.kube.tls import TLSConfigError, trust_root
from kdraexp.util.aliases import expands_past
from kdraexp.util.files import read_regular

SERVICEACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
EXPANSION = 100_000
"""Values a kubeconfig may hold once its YAML aliases are followed (a real one holds hundreds)."""


class ConfigError(Exception):
    """No usable cluster configuration; the message says what was tried."""


@attrs.frozen
class ExecConfig:
    """A ``client.authentication.k8s.io`` exec credential plugin."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    provide_cluster_info: bool = False


@attrs.frozen
class ClusterConfig:
    """Everything needed to reach and authenticate to the API server."""

    server: str
    origin: str
    """Where this came from, for logs: ``in-cluster`` or ``kubeconfig <file> context <name>``."""
    ca_pem: bytes | None = attrs.field(default=None, repr=False)
    insecure: bool = False
    tls_server_name: str | None = None
    client_cert_pem: bytes | None = attrs.field(default=None, repr=False)
    client_key_pem: bytes | None = attrs.field(default=None, repr=False)
    token: str | None = attrs.field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    exec: ExecConfig | None = None
    warnings: tuple[str, ...] = ()


def load(
    environ: Mapping[str, str],
    home: str | None = None,
    serviceaccount_dir: str = SERVICEACCOUNT_DIR,
) -> ClusterConfig:
    """Find the cluster configuration as client-go's default loading rules do.

    :raises ConfigError: when neither in-cluster nor kubeconfig configuration is usable.
    """
    in_cluster, why_not = _in_cluster(environ, Path(serviceaccount_dir))
    if in_cluster is not None:
        return in_cluster
    tried = [f"in-cluster ({why_not})"]
    return _from_kubeconfig(environ, home, tried)


def _in_cluster(environ: Mapping[str, str], directory: Path) -> tuple[ClusterConfig | None, str]:
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        return None, "KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set"
    token_path = directory / "token"
    try:
        read_regular(token_path)
    except OSError as error:
        return None, f"cannot read {token_path}: {error.strerror or error}"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    warnings = []
    ca_path = directory / "ca.crt"
    try:
        ca_pem: bytes | None = read_regular(ca_path)
    except OSError as error:
        ca_pem = None
        reason = error.strerror or str(error)
        warnings.append(f"cannot read {ca_path} ({reason}); trusting the system roots")
    return (
        ClusterConfig(
            server=f"https://{host}:{port}",
            origin="in-cluster",
            ca_pem=ca_pem,
            token_file=str(token_path),
            warnings=tuple(warnings),
        ),
        "",
    )


def kubeconfig_paths(environ: Mapping[str, str], home: str | None) -> list[Path]:
    """The kubeconfig files to merge: ``KUBECONFIG``'s existing entries, else ``~/.kube/config``."""
    if environ.get("KUBECONFIG"):
        paths: list[Path] = []
        for entry in environ["KUBECONFIG"].split(os.pathsep):
            if entry and Path(entry).exists() and Path(entry) not in paths:
                paths.append(Path(entry))
        return paths
    default = Path(home or os.path.expanduser("~")) / ".kube" / "config"
    return [default] if default.exists() else []


def _from_kubeconfig(
    environ: Mapping[str, str], home: str | None, tried: list[str]
) -> ClusterConfig:
    paths = kubeconfig_paths(environ, home)
    if environ.get("KUBECONFIG"):
        tried.append(f"KUBECONFIG={environ['KUBECONFIG']!r} ({len(paths)} existing file(s))")
    else:
        tried.append("~/.kube/config (" + ("found" if paths else "not found") + ")")
    merged = _merge([(path, _read(path)) for path in paths])
    context_name = merged.current_context
    if not context_name:
        raise ConfigError(
            "no usable Kubernetes configuration: tried "
            + ", ".join(tried)
            + "; no current-context is set"
        )
    context = merged.contexts.get(context_name)
    if context is None:
        raise ConfigError(f"kubeconfig: context {context_name!r} is not defined")
    _, context_body = context
    cluster_name = _text(context_body.get("cluster"), "context cluster")
    user_name = _text(context_body.get("user"), "context user")
    if cluster_name not in merged.clusters:
        raise ConfigError(
            f"kubeconfig: context {context_name!r} names cluster {cluster_name!r}, "
            "which is not defined"
        )
    cluster_file, cluster = merged.clusters[cluster_name]
    user_file, user = merged.users.get(user_name, (cluster_file, {}))
    origin = f"kubeconfig {merged.context_file} context {context_name}"
    return _resolve(
        cluster_name, cluster_file, cluster, user_name, user_file, user, origin, environ
    )


@attrs.define
class _Merged:
    clusters: dict[str, tuple[Path, dict[str, Any]]] = attrs.Factory(dict)
    users: dict[str, tuple[Path, dict[str, Any]]] = attrs.Factory(dict)
    contexts: dict[str, tuple[Path, dict[str, Any]]] = attrs.Factory(dict)
    current_context: str = ""
    context_file: Path | None = None


def _read(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(read_regular(path).decode("utf-8"))
    except OSError as error:
        raise ConfigError(f"kubeconfig {path}: cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"kubeconfig {path}: not UTF-8 text: {error.reason}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"kubeconfig {path}: not valid YAML: {_yaml_problem(error)}") from None
    if document is None:
        return {}
    if expands_past(document, EXPANSION):
        raise ConfigError(
            f"kubeconfig {path}: its YAML aliases expand to more than {EXPANSION:,} values"
        )
    if not isinstance(document, dict):
        raise ConfigError(f"kubeconfig {path}: expected a mapping at the top level")
    return document


def _merge(documents: list[tuple[Path, dict[str, Any]]]) -> _Merged:
    """Merge kubeconfig files: the first file to define a name, or current-context, wins."""
    merged = _Merged()
    for path, document in documents:
        for key, table in (
            ("clusters", merged.clusters),
            ("users", merged.users),
            ("contexts", merged.contexts),
        ):
            entries = document.get(key) or []
            if not isinstance(entries, list):
                raise ConfigError(f"kubeconfig {path}: {key} must be a list")
            inner = key[:-1]
            for entry in entries:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    raise ConfigError(f"kubeconfig {path}: every {inner} needs a name")
                body = entry.get(inner) or {}
                if not isinstance(body, dict):
                    raise ConfigError(
                        f"kubeconfig {path}: {inner} {entry['name']!r} is not a mapping"
                    )
                table.setdefault(entry["name"], (path, body))
        current = document.get("current-context")
        if current and not merged.current_context:
            merged.current_context = str(current)
            merged.context_file = path
    return merged


def _resolve(
    cluster_name: str,
    cluster_file: Path,
    cluster: dict[str, Any],
    user_name: str,
    user_file: Path,
    user: dict[str, Any],
    origin: str,
    environ: Mapping[str, str],
) -> ClusterConfig:
    where = f"kubeconfig cluster {cluster_name!r}"
    server = _server(cluster, where)
    insecure = _flag(cluster.get("insecure-skip-tls-verify"), f"{where} insecure-skip-tls-verify")
    ca_pem = _file_or_data(cluster, "certificate-authority", cluster_file, where)
    if insecure and ca_pem is not None:
        raise ConfigError(
            f"{where}: specifying a root certificates file with the insecure flag is not allowed"
        )
    if ca_pem is not None:
        _check_ca(ca_pem, cluster, cluster_file, where)
    who = f"kubeconfig user {user_name!r}"
    if user.get("auth-provider"):
        raise ConfigError(
            f"{who} uses an auth-provider plugin, which kdraexp does not support; "
            "use a token, a client certificate or an exec credential plugin"
        )
    cert = _file_or_data(user, "client-certificate", user_file, who)
    key = _file_or_data(user, "client-key", user_file, who)
    if (cert is None) != (key is None):
        raise ConfigError(f"{who}: client-certificate and client-key must be given together")
    token = _text(user.get("token"), f"{who} token") or None
    token_file = _text(user.get("tokenFile"), f"{who} tokenFile") or None
    if token_file:
        token_file = str(_relative_to(user_file, token_file))
    username = _text(user.get("username"), f"{who} username") or None
    password = _text(user.get("password"), f"{who} password") or None
    if (username or password) and (token or token_file):
        raise ConfigError(f"{who}: username/password or bearer token may be set, but not both")
    exec_config = None
    if user.get("exec") and not (token or token_file or username or cert):
        exec_config = _exec(user["exec"], user_file, who)
    credentials = bool(token or token_file or username or password or exec_config)
    return ClusterConfig(
        server=server.rstrip("/"),
        origin=origin,
        ca_pem=ca_pem,
        insecure=insecure,
        tls_server_name=_text(cluster.get("tls-server-name"), f"{where} tls-server-name") or None,
        client_cert_pem=cert,
        client_key_pem=key,
        token=token,
        token_file=token_file,
        username=username,
        password=password,
        exec=exec_config,
        warnings=_warnings(server, credentials, where, who, environ),
    )


def _server(cluster: dict[str, Any], where: str) -> str:
    """The cluster's server: an http(s) URL with a host and a port, reached directly."""
    server = _text(cluster.get("server"), f"{where} server")
    if not server:
        raise ConfigError(f"{where} has no server")
    if not server.startswith(("https://", "http://")):
        raise ConfigError(f"{where}: server {redacted(server)!r} is not an http(s) URL")
    try:
        url = DecodedURL.from_text(server)
        if not url.host:
            raise ValueError("no host")
        if not 0 < (url.port or 0) < 65536:
            raise ValueError(f"port {url.port} is out of range")
        url.to_uri()  # encodable as an HTTP request
    except ValueError as error:
        raise ConfigError(f"{where}: server {redacted(server)!r} is not a URL: {error}") from None
    if cluster.get("proxy-url"):
        raise ConfigError(
            f"{where} sets proxy-url, which kdraexp does not support; "
            "reach the API server directly or remove proxy-url"
        )
    return server


def _warnings(
    server: str, credentials: bool, where: str, who: str, environ: Mapping[str, str]
) -> tuple[str, ...]:
    """What is worth a warning: a proxy not used, credentials sent in the clear."""
    if server.startswith("https://"):
        proxies = [name for name in ("HTTPS_PROXY", "https_proxy") if environ.get(name)]
        if proxies:
            return (f"{proxies[0]} is set but not used: kdraexp connects directly",)
    elif credentials:
        return (
            f"{where}: the server is http://, so the credentials of {who} cross the network "
            "unencrypted; use https",
        )
    return ()


def _exec(raw: Any, base: Path, who: str) -> ExecConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{who}: exec must be a mapping")
    command = _text(raw.get("command"), f"{who} exec command")
    if not command:
        raise ConfigError(f"{who}: exec has no command")
    if os.sep in command and not os.path.isabs(command):
        command = str(_relative_to(base, command))
    api_version = _text(raw.get("apiVersion"), f"{who} exec apiVersion")
    if api_version not in (
        "client.authentication.k8s.io/v1",
        "client.authentication.k8s.io/v1beta1",
    ):
        raise ConfigError(f"{who}: exec apiVersion {api_version!r} is not supported")
    if raw.get("interactiveMode") == "Always":
        raise ConfigError(
            f"{who}: exec plugin needs an interactive terminal (interactiveMode: Always)"
        )
    env = []
    for item in raw.get("env") or []:
        if not isinstance(item, dict) or "name" not in item:
            raise ConfigError(f"{who}: exec env entries need a name and a value")
        env.append((str(item["name"]), str(item.get("value", ""))))
    args = raw.get("args") or []
    if not isinstance(args, list):
        raise ConfigError(f"{who}: exec args must be a list")
    return ExecConfig(
        command=command,
        args=tuple(str(arg) for arg in args),
        env=tuple(env),
        api_version=api_version,
        provide_cluster_info=_flag(raw.get("provideClusterInfo"), f"{who} exec provideClusterInfo"),
    )


def _file_or_data(section: dict[str, Any], key: str, base: Path, where: str) -> bytes | None:
    data = section.get(f"{key}-data")
    if data:
        if not isinstance(data, str):
            raise ConfigError(f"{where}: {key}-data must be a base64 string")
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{where}: {key}-data is not valid base64") from None
    name = section.get(key)
    if not name:
        return None
    path = _relative_to(base, str(name))
    try:
        return read_regular(path)
    except OSError as error:
        raise ConfigError(f"{where}: cannot read {key} {path}: {error.strerror or error}") from None


def _check_ca(ca_pem: bytes, cluster: dict[str, Any], base: Path, where: str) -> None:
    """Certificates that cannot be loaded: said here, with the cluster and the file.

    Found later, when the client is made, the error could name neither.
    """
    try:
        trust_root(ca_pem)
    except TLSConfigError as error:
        if cluster.get("certificate-authority-data"):
            what = f"certificate-authority-data in {base}"
        else:
            what = (
                f"certificate-authority {_relative_to(base, str(cluster['certificate-authority']))}"
            )
        raise ConfigError(f"{where}: {what}: {error}") from None


def _relative_to(kubeconfig: Path, name: str) -> Path:
    path = Path(os.path.expanduser(name))
    return path if path.is_absolute() else kubeconfig.parent / path


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        raise ConfigError(f"{what} must be a string")
    return str(value)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What is wrong and where, without the offending text (it can be a token)."""
    problem = getattr(error, "problem", None) or "malformed"
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}"


def _flag(value: Any, what: str) -> bool:
    """A YAML boolean; anything else (the string "false" included) is refused, as client-go does."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ConfigError(f"{what} must be true or false (a YAML boolean), got {value!r}")
    return value


def redacted(server: str) -> str:
    """The server URL without a password, for logs."""
    try:
        url = DecodedURL.from_text(server)
    except ValueError:
        return server
    return url.replace(userinfo=("",)).to_text() if url.userinfo else server
