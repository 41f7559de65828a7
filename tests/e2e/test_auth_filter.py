"""--auth-filter against a real kube-apiserver with RBAC.

Its TokenReviews and SubjectAccessReviews answer; the chart's rules let the exporter ask them,
and its metrics-reader ClusterRole lets a bound ServiceAccount scrape.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.controlplane import Kube
from tests.e2e.harness import (
    CHART_NAMESPACE,
    RELEASE_OBJECTS,
    Exporter,
    ensure_namespace,
    mint_token,
    write_kubeconfig,
)
from tests.helm import render

pytestmark = pytest.mark.slow

RELEASE = "authfilter"
READER = "metrics-scraper"
STRANGER = "not-a-scraper"


@pytest.fixture(scope="module")
def exporter(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exporter]:
    """The exporter with --auth-filter and the chart's RBAC for it, the reader bound."""
    ensure_namespace(kube, CHART_NAMESPACE)
    docs = render(
        {
            "fullnameOverride": RELEASE,
            "authFilter": {
                "enabled": True,
                "metricsReaderSubjects": [
                    {"kind": "ServiceAccount", "name": READER, "namespace": CHART_NAMESPACE}
                ],
            },
        },
        extra=("--namespace", CHART_NAMESPACE),
    )
    for doc in docs:
        if doc["kind"] in RELEASE_OBJECTS:
            kube.create(RELEASE_OBJECTS[doc["kind"]].format(ns=CHART_NAMESPACE), doc)
    for account in (READER, STRANGER):
        kube.create(
            RELEASE_OBJECTS["ServiceAccount"].format(ns=CHART_NAMESPACE),
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}},
        )
    directory = tmp_path_factory.mktemp("auth-filter")
    config = write_kubeconfig(directory / "kubeconfig", kube, mint_token(kube, RELEASE))
    running = Exporter(directory / "run", ["--auth-filter"], {"KUBECONFIG": str(config)})
    yield running
    assert running.stop() == 0


def get(port: int, token: str | None = None) -> tuple[int, str]:
    """GET /metrics with *token* as a bearer token (if any)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def reviews_sent(exporter: Exporter, token: str) -> float:
    """Reviews the exporter says it sent, read from its telemetry listener with *token*."""
    code, text = get(exporter.telemetry_port, token)
    assert code == 200, text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "kube_dra_exporter_auth_filter_reviews_total"
    )


def token_reviews_served(kube: Kube) -> float:
    """TokenReviews the API server has answered (its apiserver_request_total)."""
    text = kube.get("/metrics")
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "apiserver_request_total"
        and sample.labels.get("resource") == "tokenreviews"
        and sample.labels.get("verb") == "POST"
    )


def test_a_bound_token_is_served_others_are_not(kube: Kube, exporter: Exporter) -> None:
    """Bound to metrics-reader: 200; not bound: 403 naming it; no token: 401."""
    reader, stranger = mint_token(kube, READER), mint_token(kube, STRANGER)
    code, body = get(exporter.port, reader)
    assert code == 200, body
    assert "kube_dra_exporter" not in body  # the main listener's, not the telemetry's
    code, body = get(exporter.port, stranger)
    assert (code, body) == (
        403,
        f"Authorization denied for user system:serviceaccount:{CHART_NAMESPACE}:{STRANGER}\n",
    )
    assert get(exporter.port)[0] == 401
    assert get(exporter.port, reader[:-4] + "AAAA")[0] == 401
    assert get(exporter.telemetry_port)[0] == 401
    assert get(exporter.telemetry_port, stranger)[0] == 403


def test_a_second_scrape_within_the_cache_window_sends_no_review(
    kube: Kube, exporter: Exporter
) -> None:
    """Counted by the exporter's telemetry and by the API server's own request counter."""
    reader = mint_token(kube, READER)
    served = token_reviews_served(kube)
    assert get(exporter.port, reader)[0] == 200
    sent = reviews_sent(exporter, reader)
    assert token_reviews_served(kube) == served + 1
    assert get(exporter.port, reader)[0] == 200
    assert reviews_sent(exporter, reader) == sent
    assert token_reviews_served(kube) == served + 1
