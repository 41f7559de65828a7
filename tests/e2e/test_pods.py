"""The Pod view, with kube-scheduler as the judge: demand no claim shows, why, device health.

A simulated cluster of its own (tests/e2e/simulated.py): one Node with two GPUs, a DeviceClass
that serves them as the extended resource ``example.com/gpu``. Pods ask for it the old way
(``limits: {example.com/gpu: 1}``); the scheduler makes their claims just before binding. The
device health a kubelet would report is written into a bound pod's status, as the kubelet does.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Exporter, wait_until, write_kubeconfig
from tests.e2e.simulated import Simulated, start_simulated
from tests.e2e.simworld import (
    CLAIMS,
    DRIVER,
    NAMESPACE,
    PODS,
    RESOURCE,
    RESOURCES,
    SCHEDULED,
    bound,
    device_class,
    ok,
    pool_slice,
    samples,
    unschedulable,
    values,
)

pytestmark = pytest.mark.slow
NODE = "pods-a"
EXTENDED = "example.com/gpu"
TEMPLATES = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaimtemplates"


def gpu(name: str) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": "gpu"}}}


def extended_pod(name: str) -> dict[str, Any]:
    """A pod asking for one GPU as an extended resource, as with a device plugin."""
    container = {
        "name": "c",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"limits": {EXTENDED: "1"}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }


def template_pod(name: str, template: str) -> dict[str, Any]:
    """A pod whose claim is made from *template*."""
    container = {
        "name": "c",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"claims": [{"name": "gpu"}]},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [container],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def template(name: str, deviceclass: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": deviceclass}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("pods"))
    kube = simulated.kube
    try:
        simulated.add_node(NODE)
        simulated.add_namespace(NAMESPACE)
        serving = device_class("pods-gpu", "gpu")
        serving["spec"]["extendedResourceName"] = EXTENDED
        kube.create(f"{RESOURCE}/deviceclasses", serving)
        kube.create(
            f"{RESOURCE}/resourceslices",
            pool_slice(NODE, NODE, NODE, devices=[gpu("gpu-0"), gpu("gpu-1")]),
        )
        kube.create(TEMPLATES, template("pods-gpu", "pods-gpu"))
        kube.create(TEMPLATES, template("pods-nope", "pods-nope"))
        yield simulated
    finally:
        simulated.stop()


def exporter(cluster: Simulated, directory: Path, mode: str) -> Exporter:
    directory.mkdir()
    config = write_kubeconfig(directory / "kubeconfig", cluster.kube, cluster.kube.token)
    return Exporter(
        directory / "run",
        ["--resources", f"{RESOURCES},pods", "--mode", mode],
        {"KUBECONFIG": str(config)},
    )


def scrape(running: Exporter) -> str:
    _, body = wait_until(lambda: ok(running.scrape()), 30, "a scrape")
    return body


def waiting(body: str) -> dict[str, tuple[str, str, float]]:
    return {
        row["pod"]: (row["resource"], row["deviceclass_name"], value)
        for row, value in values(body, "kube_pod_dra_extended_resource_request")
    }


def causes(body: str) -> dict[str, str]:
    return {row["pod"]: row["cause"] for row in samples(body, "kube_pod_dra_unschedulable")}


def owned_claims(body: str, pod: str) -> list[str]:
    return [
        row["resourceclaim_name"]
        for row in samples(body, "kube_resourceclaim_info")
        if row["owner_kind"] == "Pod" and row["owner_name"] == pod
    ]


def test_extended_demand_waits_then_moves_to_its_claim(cluster: Simulated, tmp_path: Path) -> None:
    """Both GPUs taken: a third pod waits with no claim, shown as demand with cause ``claims``.

    One holder deleted, the scheduler binds the waiting pod and makes its claim; the exporter
    (watch mode) moves it from waiting demand to the claim families.
    """
    for name in ("holder-0", "holder-1"):
        cluster.kube.create(PODS, extended_pod(name))
        wait_until(partial(bound, cluster, name), SCHEDULED, f"{name} bound")
    cluster.kube.create(PODS, extended_pod("waiter"))
    condition = wait_until(partial(unschedulable, cluster, "waiter"), SCHEDULED, "waiter held")
    assert "cannot allocate all claims" in condition["message"], condition
    assert not [c for c in cluster.kube.get(CLAIMS)["items"] if "waiter" in c["metadata"]["name"]]
    running = exporter(cluster, tmp_path / "watch", "watch")
    try:
        body = scrape(running)
        assert waiting(body) == {"waiter": (EXTENDED, "pods-gpu", 1.0)}
        assert causes(body) == {"waiter": "claims"}
        for holder in ("holder-0", "holder-1"):
            assert len(owned_claims(body, holder)) == 1
        cluster.delete_pod(NAMESPACE, "holder-0")
        wait_until(partial(bound, cluster, "waiter"), SCHEDULED, "waiter bound once a GPU is free")

        def moved() -> str | None:
            now = scrape(running)
            return now if owned_claims(now, "waiter") and "waiter" not in waiting(now) else None

        body = wait_until(moved, 10, "the waiter's demand shown as its claim")
        assert "waiter" not in causes(body)
        (made,) = owned_claims(body, "waiter")
        results = [r for r in samples(body, "kube_resourceclaim_allocation_result_info")]
        assert [r["pool"] for r in results if r["resourceclaim_name"] == made] == [NODE]
    finally:
        running.stop()
        cluster.delete_pods(NAMESPACE, "holder-0", "holder-1", "waiter")


def test_missing_class_and_device_health(cluster: Simulated, tmp_path: Path) -> None:
    """A pod whose claim's class does not exist shows ``class_missing``.

    A bound pod's device health, written into its status as the kubelet writes it, shows per
    device.
    """
    cluster.kube.create(PODS, template_pod("no-class", "pods-nope"))
    cluster.kube.create(PODS, template_pod("sick", "pods-gpu"))
    condition = wait_until(partial(unschedulable, cluster, "no-class"), SCHEDULED, "no-class held")
    assert "does not exist" in condition["message"], condition
    wait_until(partial(bound, cluster, "sick"), SCHEDULED, "sick bound")
    made = cluster.kube.get(f"{PODS}/sick")["status"]["resourceClaimStatuses"][0][
        "resourceClaimName"
    ]
    (result,) = cluster.kube.get(f"{CLAIMS}/{made}")["status"]["allocation"]["devices"]["results"]
    device = f"{result['driver']}/{result['pool']}/{result['device']}"
    pod = cluster.kube.get(f"{PODS}/sick")
    pod["status"]["containerStatuses"] = [
        {
            "name": "c",
            "image": "registry.k8s.io/pause:3.10",
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "state": {"waiting": {"reason": "ContainerCreating"}},
            "allocatedResourcesStatus": [
                {
                    "name": "claim:gpu",
                    "resources": [{"resourceID": device, "health": "Unhealthy"}],
                }
            ],
        }
    ]
    cluster.kube.put(f"{PODS}/sick/status", pod)
    running = exporter(cluster, tmp_path / "list", "list")
    try:
        body = scrape(running)
        assert causes(body).get("no-class") == "class_missing"
        health = samples(body, "kube_pod_dra_device_health")
        assert [
            (
                h["pod"],
                h["container"],
                h["resourceclaim_name"],
                h["request"],
                h["driver"],
                h["pool"],
                h["device_name"],
                h["health"],
            )
            for h in health
        ] == [("sick", "c", made, "", DRIVER, NODE, result["device"], "unhealthy")]
    finally:
        running.stop()
        cluster.delete_pods(NAMESPACE, "no-class", "sick")
