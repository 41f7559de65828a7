"""A real Prometheus (2.42 and 3.16) scrapes the exporter; promtool lints the exposition."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import tools
from tests.e2e import dataset, prometheus
from tests.e2e.controlplane import Kube
from tests.e2e.harness import Exporter, ensure_namespace, mint_token, wait_until, write_kubeconfig
from tests.e2e.prometheus import query

pytestmark = pytest.mark.slow
DRA_KINDS = ("resourceclaim", "resourceslice", "resourcepool", "deviceclass", "devicetaintrule")
DRA_SERIES = f'job="kdraexp", __name__=~"kube_({"|".join(DRA_KINDS)})_.*"'
ORIGINAL = (
    "kube_deviceclass_hourly_cost",
    "kube_resourceclaim_status_allocated_device",
    "kube_resourceclaim_status_reserved_for_pod",
    "kube_resourceclaim_status_reserved_total",
    "kube_resourceslice_device_capacity_decoders",
    "kube_resourceslice_device_capacity_memory_bytes",
    "kube_resourceslice_device_capacity_multiprocessors",
)


@pytest.fixture(scope="module", params=sorted(tools.PROMETHEUS))
def prometheus_bin(request: pytest.FixtureRequest) -> Path:
    """Prometheus and promtool of each release (tests/tools.py): Debian's 2.42 and 3.16.

    Each scrapes with its own default protocols: 3.x asks for OpenMetrics 1.0.0 first, then
    0.0.1, then text 1.0.0 and 0.0.4, and fails a scrape whose Content-Type it cannot tell.
    """
    directory: Path = tools.PROMETHEUS[request.param]()
    return directory


@pytest.fixture(scope="module")
def exporter(
    kube: Kube,
    chart_rbac: dict[str, dict[str, object]],
    dra_objects: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Exporter]:
    ensure_namespace(kube, "prom")
    dataset.create_claim(kube, "scraped", "prom", [("node-a", "gpu-0")], ["scraper-pod"])
    account = str(chart_rbac["ServiceAccount"]["metadata"]["name"])  # type: ignore[index]
    directory = tmp_path_factory.mktemp("prometheus-exporter")
    config = write_kubeconfig(directory / "kubeconfig", kube, mint_token(kube, account))
    running = Exporter(directory / "run", [], {"KUBECONFIG": str(config)})
    yield running
    assert running.stop() == 0


def test_prometheus_scrapes(prometheus_bin: Path, exporter: Exporter, tmp_path: Path) -> None:
    """up is 1 and every family has the series the exposition has."""
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "kdraexp",
                "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}],
            }
        ],
    }
    with prometheus.serve(prometheus_bin, config, tmp_path) as port:

        def scraped() -> list[dict[str, object]] | None:
            try:
                result = query(port, 'up{job="kdraexp"}')
            except OSError:
                return None
            return result if result and result[0]["value"][1] == "1" else None

        wait_until(scraped, 60, "Prometheus scraping the exporter with up == 1")
        _, body = exporter.scrape()
        prefixes = tuple(f"kube_{kind}_" for kind in DRA_KINDS)
        expected = Counter(
            line.split("{")[0] for line in body.splitlines() if line.startswith(prefixes)
        )
        assert set(ORIGINAL) < set(expected)
        counts = {}
        for item in query(port, f"count by (__name__) ({{{DRA_SERIES}}})"):
            counts[item["metric"]["__name__"]] = int(item["value"][1])
        assert counts == dict(expected)
        pods = query(port, 'kube_resourceclaim_status_reserved_for_pod{namespace="prom"}')
        assert [p["metric"]["pod_name"] for p in pods] == ["scraper-pod"]


def test_promtool_accepts_exposition(prometheus_bin: Path, exporter: Exporter) -> None:
    """promtool's only complaints are about names the contract fixes; none about telemetry.

    The original's gauge ending in _total, and three names of the metrics reference:
    kube_resourceclaim_request_devices ends in _count, and the two shared-counter gauges say
    "counter" (a DRA counter, not a Prometheus one).
    """
    _, body = exporter.scrape()
    problems = tools.lint(prometheus_bin, body)
    assert problems == [
        "kube_resourceclaim_status_reserved_total "
        'non-counter metrics should not have "_total" suffix',
    ], problems
    assert tools.lint(prometheus_bin, exporter.telemetry()) == []
