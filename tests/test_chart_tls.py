"""The chart's tls values: web configuration, Secrets mounted as directories, probes, monitors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from kdraexp.serve import tlscontext, webconfig
from tests.helm import RenderError, notes_chart, render, resource

pytestmark = pytest.mark.slow
CERT_MANAGER = ("--api-versions=cert-manager.io/v1/Certificate",)
FROM_SECRET: dict[str, Any] = {"tls": {"enabled": True, "existingSecret": "kdraexp-serving"}}
MUTUAL: dict[str, Any] = {
    "tls": {
        "enabled": True,
        "certManager": {
            "enabled": True,
            "issuerRef": {"name": "cluster-ca", "kind": "ClusterIssuer"},
        },
        "clientAuthType": "RequireAndVerifyClientCert",
        "clientCA": {"configMap": "scrapers-ca"},
        "clientAllowedSANs": ["prometheus.monitoring.svc"],
        "monitor": {"clientCertSecret": "prometheus-client"},
    },
    "prometheus": {"servicemonitor": {"enabled": True}},
}


def pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = resource(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def web_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    secrets = [doc for doc in docs if doc["kind"] == "Secret"]
    (secret,) = [doc for doc in secrets if doc["metadata"]["name"].endswith("-web-config")]
    loaded: dict[str, Any] = yaml.safe_load(secret["stringData"]["web-config.yml"])
    return loaded


def test_from_an_existing_secret() -> None:
    """HTTPS on both listeners; probes over HTTPS (no client certificate is required)."""
    docs = render({**FROM_SECRET, "prometheus": {"podmonitor": {"enabled": True}}})
    spec = pod(docs)
    main = spec["containers"][0]
    assert "--tls-config=/etc/kdraexp/web/web-config.yml" in main["args"]
    assert not any(arg.startswith("--probe-listen") for arg in main["args"])
    assert spec["volumes"] == [
        {"name": "tls", "secret": {"secretName": "kdraexp-serving"}},
        {"name": "web-config", "secret": {"secretName": "regression-kube-dra-exporter-web-config"}},
    ]
    assert all("subPath" not in mount for mount in main["volumeMounts"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert main[probe]["httpGet"]["scheme"] == "HTTPS"
        assert main[probe]["httpGet"]["port"] == "http"
    assert web_config(docs) == {
        "tls_server_config": {
            "cert_file": "/etc/kdraexp/tls/tls.crt",
            "key_file": "/etc/kdraexp/tls/tls.key",
            "client_auth_type": "NoClientCert",
            "min_version": "TLS12",
        }
    }
    for endpoint in resource(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]:
        assert endpoint["scheme"] == "https"
        assert endpoint["tlsConfig"] == {
            "serverName": "regression-kube-dra-exporter.exporter.svc",
            "ca": {"secret": {"name": "kdraexp-serving", "key": "ca.crt"}},
        }
    assert "Certificate" not in [doc["kind"] for doc in docs]
    annotated = resource(render(FROM_SECRET), "Deployment")["spec"]["template"]["metadata"]
    assert annotated["annotations"]["prometheus.io/scheme"] == "https"


def test_client_certificates_and_cert_manager(tmp_path: Path) -> None:
    """Client certificates required: probes on the plain probe listener; Prometheus presents one."""
    docs = render(MUTUAL, extra=CERT_MANAGER)
    spec = pod(docs)
    main = spec["containers"][0]
    assert "--probe-listen=:8082" in main["args"]
    assert {"containerPort": 8082, "name": "probes", "protocol": "TCP"} in main["ports"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert main[probe]["httpGet"] == {"port": "probes", "path": path, "scheme": "HTTP"}
    assert {"name": "client-ca", "configMap": {"name": "scrapers-ca"}} in spec["volumes"]
    assert {"name": "tls", "secret": {"secretName": "regression-kube-dra-exporter-tls"}} in spec[
        "volumes"
    ]
    certificate = resource(docs, "Certificate")["spec"]
    assert certificate["secretName"] == "regression-kube-dra-exporter-tls"
    assert "regression-kube-dra-exporter.exporter.svc" in certificate["dnsNames"]
    assert certificate["issuerRef"] == {
        "name": "cluster-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    endpoint = resource(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["tlsConfig"]["cert"] == {
        "secret": {"name": "prometheus-client", "key": "tls.crt"}
    }
    assert endpoint["tlsConfig"]["keySecret"] == {"name": "prometheus-client", "key": "tls.key"}
    rendered = yaml.safe_dump(web_config(docs)).replace("/etc/kdraexp/", f"{tmp_path}/")
    for directory, name, content in _files():
        (tmp_path / directory).mkdir(exist_ok=True)
        (tmp_path / directory / name).write_bytes(content)
    (tmp_path / "web.yml").write_text(rendered)
    config = webconfig.load(str(tmp_path / "web.yml"))  # what kdraexp accepts, as rendered
    tlscontext.context(config)
    assert config.client_allowed_sans == ("prometheus.monitoring.svc",)


def _files() -> list[tuple[str, str, bytes]]:
    ca = trustme.CA()
    issued = ca.issue_cert("regression-kube-dra-exporter.exporter.svc")
    return [
        ("tls", "tls.crt", issued.cert_chain_pems[0].bytes()),
        ("tls", "tls.key", issued.private_key_pem.bytes()),
        ("client-ca", "ca.crt", trustme.CA().cert_pem.bytes()),
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tls": {"enabled": True}}, "tls.enabled needs one of tls.existingSecret"),
        (
            {"tls": {"enabled": True, "existingSecret": "s", "certManager": {"enabled": True}}},
            "tls.enabled needs one of tls.existingSecret",
        ),
        (
            {"tls": {"enabled": True, "certManager": {"enabled": True}}},
            "tls.certManager.enabled needs tls.certManager.issuerRef.name",
        ),
        (
            {"tls": {**FROM_SECRET["tls"], "clientAuthType": "RequireAndVerifyClientCert"}},
            "tls.clientAuthType RequireAndVerifyClientCert needs tls.clientCA.secret",
        ),
        (
            {"tls": {**FROM_SECRET["tls"], "clientCA": {"secret": "ca"}}},
            "tls.clientCA is given but tls.clientAuthType is NoClientCert",
        ),
        (
            {"tls": {**FROM_SECRET["tls"], "clientAllowedSANs": ["x"]}},
            "tls.clientAllowedSANs needs tls.clientAuthType RequireAndVerifyClientCert",
        ),
        (
            {
                "tls": {**MUTUAL["tls"], "monitor": {"clientCertSecret": ""}},
                "prometheus": MUTUAL["prometheus"],
            },
            "refuses Prometheus without a client certificate: set tls.monitor.clientCertSecret",
        ),
        (
            {"tls": {**FROM_SECRET["tls"], "probePort": 8081}},
            "tls.probePort 8081 is a listener's port already",
        ),
        ({"tls": {"clientAuthType": "RequireClientCert"}}, "at '/tls/clientAuthType'"),
        ({"tls": {"minVersion": "1.2"}}, "at '/tls/minVersion'"),
    ],
)
def test_what_cannot_work_is_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(RenderError) as caught:
        render(values, extra=CERT_MANAGER)
    assert message in str(caught.value)


def test_cert_manager_needs_its_crd() -> None:
    """Without cert-manager's CRD, the chart says so instead of failing at apply."""
    with pytest.raises(RenderError, match="needs cert-manager's Certificate CRD"):
        render(MUTUAL, extra=("--is-upgrade",))


def test_notes_say_https(tmp_path: Path) -> None:
    """NOTES.txt's curl and scrape address follow tls (rendered in a ConfigMap, as test_chart's)."""
    chart = notes_chart(tmp_path)
    docs = render(MUTUAL, chart=chart, extra=CERT_MANAGER)
    notes = [doc for doc in docs if doc["kind"] == "ConfigMap"][-1]["data"]["notes"]
    assert (
        "curl --insecure --cert client.crt --key client.key https://localhost:8080/metrics" in notes
    )
    assert "Prometheus scrapes https://regression-kube-dra-exporter.exporter.svc:8080" in notes
