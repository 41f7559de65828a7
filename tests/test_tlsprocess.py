"""The installed ``twistd -n kdraexp`` with --tls-config: scraped over HTTPS with mTLS."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
import trustme
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.processes import free_port, get, ready, start, stop, wait_for
from tests.test_tlsserving import client, pair, refused
from tests.test_tlsserving import get as get_tls

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parent.parent / "examples" / "cluster.yaml"


@pytest_twisted.ensureDeferred
async def test_twistd_serves_https_with_client_certificates(tmp_path: Path) -> None:
    """Both listeners over HTTPS, a client certificate required; probes in plain HTTP."""
    scrapers = trustme.CA()
    for name, content in pair("127.0.0.1").items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "ca.crt").write_bytes(scrapers.cert_pem.bytes())
    (tmp_path / "web.yml").write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {
                    "cert_file": "tls.crt",
                    "key_file": "tls.key",
                    "client_ca_file": "ca.crt",
                    "client_auth_type": "RequireAndVerifyClientCert",
                },
                "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
            }
        )
    )
    main, telemetry, probes = free_port(), free_port(), free_port()
    process = start(
        [
            "--listen",
            f"127.0.0.1:{main}",
            "--telemetry-listen",
            f"127.0.0.1:{telemetry}",
            "--probe-listen",
            f"127.0.0.1:{probes}",
            "--tls-config",
            str(tmp_path / "web.yml"),
            "--source",
            f"file:{EXAMPLE}",
        ],
        tmp_path,
        {"KUBECONFIG": "/nonexistent"},
        via_twistd=True,
    )
    try:
        await wait_for(lambda: ready(probes), 60)  # 503 while the collection at start runs
        assert await get(f"http://127.0.0.1:{probes}/readyz") == (200, b"ok\n")
        assert (await get(f"http://127.0.0.1:{probes}/metrics"))[0] == 404  # type: ignore[index]
        scraper = client(certificate=scrapers.issue_cert("prometheus"))
        answer = await get_tls(main, scraper, path="/metrics")
        assert answer.status == 200
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert b"kube_resourceslice_device_capacity_multiprocessors{" in answer.body
        own = await get_tls(telemetry, scraper, path="/metrics")
        expires = answer.certificate.not_valid_after_utc.timestamp()
        samples = {
            sample.name: sample.value
            for family in text_string_to_metric_families(own.body.decode())
            for sample in family.samples
        }
        assert samples["kube_dra_exporter_tls_certificate_not_after_timestamp_seconds"] == expires
        assert samples["kube_dra_exporter_tls_last_reload_successful"] == 1
        await refused(main, client())
        await refused(telemetry, client())
    finally:
        assert await stop(process) == 0
