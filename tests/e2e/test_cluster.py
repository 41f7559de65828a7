"""The exporter against a real kube-apiserver, with the chart's RBAC and real DRA objects."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import dataset
from tests.e2e.controlplane import APIError, ControlPlane, Kube
from tests.e2e.harness import (
    CHART_NAMESPACE,
    Exporter,
    bound_account,
    ensure_namespace,
    mint_token,
    scrape,
    wait_until,
    write_kubeconfig,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service_account(chart_rbac: dict[str, dict[str, object]]) -> str:
    return str(chart_rbac["ServiceAccount"]["metadata"]["name"])  # type: ignore[index]


@pytest.fixture(scope="module")
def exporter(
    kube: Kube, dra_objects: None, service_account: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Exporter]:
    """The installed exporter with a kubeconfig holding a TokenRequest token of the chart's SA."""
    directory = tmp_path_factory.mktemp("kubeconfig-exporter")
    config = write_kubeconfig(directory / "kubeconfig", kube, mint_token(kube, service_account))
    running = Exporter(directory / "run", [], {"KUBECONFIG": str(config)})
    yield running
    assert running.stop() == 0


def test_exact_samples(exporter: Exporter) -> None:
    """/metrics holds exactly the samples the objects imply, through the chart's RBAC."""
    code, body = exporter.scrape()
    assert code == 200, body
    assert dataset.dra_lines(body) == dataset.expected_lines()
    assert (
        "Error parsing 'hourly-cost' (1,5) on DeviceClass misconfigured.example.com"
        in exporter.log()
    )


def test_in_cluster_token_rotation(
    kube: Kube, control_plane: ControlPlane, dra_objects: None, service_account: str, tmp_path: Path
) -> None:
    """In-cluster mode; the token file is replaced and the old token revoked: scrapes go on."""
    accounts = tmp_path / "serviceaccount"
    accounts.mkdir()
    (accounts / "ca.crt").write_bytes(kube.ca_pem)
    (accounts / "token").write_text(mint_token(kube, service_account, secret="rotation-1"))
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(control_plane.port),
        "KUBECONFIG": "/nonexistent",
    }
    exporter = Exporter(tmp_path / "run", ["--serviceaccount-dir", str(accounts)], env)
    try:
        assert exporter.scrape()[0] == 200
        old = (accounts / "token").read_text()
        new = mint_token(kube, service_account, secret="rotation-2")
        replacement = accounts / "token.new"
        replacement.write_text(new)
        replacement.replace(accounts / "token")
        kube.delete(f"/api/v1/namespaces/{CHART_NAMESPACE}/secrets/rotation-1")
        revoked = Kube(kube.server, kube.ca_pem, old)
        wait_until(lambda: _refused(revoked), 30, "the old token being refused")
        for _ in range(3):
            code, body = exporter.scrape()
            assert code == 200, body
        assert "in-cluster" in exporter.log()
    finally:
        assert exporter.stop() == 0


def _refused(client: Kube) -> bool:
    try:
        client.get("/apis/resource.k8s.io/v1/deviceclasses?limit=1")
    except APIError as error:
        return error.code == 401
    return False


def test_rbac_removed_then_restored(
    kube: Kube, exporter: Exporter, chart_rbac: dict[str, dict[str, object]]
) -> None:
    """Without the binding every list is 403: 500, /healthz 200; restored: 200 again."""
    binding = chart_rbac["ClusterRoleBinding"]
    name = binding["metadata"]["name"]  # type: ignore[index]
    path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    kube.delete(f"{path}/{name}")
    try:
        _, body = wait_until(lambda: _code_is(exporter, 500), 30, "a 500 without RBAC")
        assert sorted(body.splitlines()) == [
            "list deviceclasses failed: 403 Forbidden",
            "list resourceclaims failed: 403 Forbidden",
            "list resourceslices failed: 403 Forbidden",
        ]
        assert "kube_" not in body
        from tests.e2e.harness import scrape

        assert scrape(exporter.port, "/healthz") == (200, "ok\n")
    finally:
        kube.create(path, binding)
    _, body = wait_until(lambda: _code_is(exporter, 200), 30, "a 200 with RBAC restored")
    assert dataset.dra_lines(body) == dataset.expected_lines()
    assert (
        'kube_dra_exporter_list_errors_total{reason="Forbidden",resource="resourceclaims"}'
        in exporter.telemetry()
    )


def _code_is(exporter: Exporter, code: int) -> tuple[int, str] | None:
    answer = exporter.scrape()
    return answer if answer[0] == code else None


@pytest.fixture(scope="module")
def no_pods(kube: Kube) -> str:
    """An identity that may list and watch every DRA resource, and nothing of pods."""
    ensure_namespace(kube, CHART_NAMESPACE)
    every = {"apiGroups": ["resource.k8s.io"], "resources": ["*"], "verbs": ["list", "watch"]}
    return bound_account(kube, "dra-without-pods", CHART_NAMESPACE, [every])


@pytest.mark.parametrize("mode", ["list", "watch"])
def test_pods_listed_without_rbac_for_pods(
    kube: Kube, dra_objects: None, no_pods: str, tmp_path: Path, mode: str
) -> None:
    """--resources names pods, the identity may not list them: every family goes.

    Not the Pod view alone: list mode answers 500 as for any failed list, watch mode 503 (pods
    never synchronised).
    """
    config = write_kubeconfig(tmp_path / "kubeconfig", kube, mint_token(kube, no_pods))
    resources = "resourceclaims,resourceslices,deviceclasses,pods"
    running = Exporter(
        tmp_path / "run", ["--resources", resources, "--mode", mode], {"KUBECONFIG": str(config)}
    )
    try:
        if mode == "list":
            _, body = wait_until(lambda: _code_is(running, 500), 30, "a 500 for pods")
            assert body == "list pods failed: 403 Forbidden\n"
        else:
            expected = "pods not synchronised yet (watch pods failed: 403 Forbidden)\n"

            def refused() -> tuple[int, str] | None:
                answer = _code_is(running, 503)
                return answer if answer is not None and answer[1] == expected else None

            _, body = wait_until(refused, 30, "a 503 for pods")
        assert "kube_" not in body
    finally:
        assert running.stop() == 0


def test_deleted_objects_disappear(kube: Kube, exporter: Exporter) -> None:
    """Deleted objects' series are gone from the next scrape."""
    kube.delete(f"{dataset.V1}/namespaces/{dataset.NAMESPACE}/resourceclaims/allocated-only")
    kube.delete(f"{dataset.V1}/resourceslices/fabric-fpga")
    kube.delete(f"{dataset.V1}/deviceclasses/mig.nvidia.com")
    code, body = exporter.scrape()
    assert code == 200
    gone = {
        line
        for line in dataset.expected_lines()
        if 'resourceclaim_name="allocated-only"' in line
        or "fabric-fpga" in line
        or 'deviceclass_name="mig.nvidia.com"' in line
    }
    assert len(gone) == 4
    assert dataset.dra_lines(body) == dataset.expected_lines() - gone


def test_many_pages(kube: Kube, dra_objects: None, service_account: str, tmp_path: Path) -> None:
    """More claims than three pages of --page-size: every one reported, in that many requests."""
    ensure_namespace(kube, "bulk")
    for index in range(25):
        dataset.create_claim(kube, f"bulk-{index:02d}", "bulk", [], [])
    config = write_kubeconfig(tmp_path / "kubeconfig", kube, mint_token(kube, service_account))
    exporter = Exporter(tmp_path / "run", ["--page-size", "7"], {"KUBECONFIG": str(config)})
    try:
        # The collection made at start lists the claims too: counted from when it has ended.
        wait_until(lambda: scrape(exporter.port, "/readyz")[0] == 200, 60, "the exporter ready")
        before = _claim_lists(kube)
        code, body = exporter.scrape()
        pages = _claim_lists(kube) - before
        telemetry = exporter.telemetry()
    finally:
        assert exporter.stop() == 0
    assert code == 200
    totals = [
        line
        for line in dataset.dra_lines(body)
        if line.startswith("kube_resourceclaim_status_reserved_total")
    ]
    assert len([line for line in totals if 'namespace="bulk"' in line]) == 25
    claims = len(totals)
    assert f'kube_dra_exporter_list_objects{{resource="resourceclaims"}} {float(claims)}' in (
        telemetry
    )
    assert claims > 3 * 7
    assert pages == math.ceil(claims / 7)


def _claim_lists(kube: Kube) -> float:
    """LIST requests for resourceclaims the API server has answered with 200 so far."""
    total = 0.0
    for family in text_string_to_metric_families(kube.get("/metrics")):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "apiserver_request_total"
                and labels.get("verb") == "LIST"
                and labels.get("resource") == "resourceclaims"
                and labels.get("code") == "200"
            ):
                total += sample.value
    return total
