"""A DRA driver's life on a real node, as the exporter sees it.

Kubernetes' own DRA test driver runs as the node's kubelet plugin (tests/node/driver.py) and
publishes its pool; the exporter, installed by the chart listing pods too, is scraped on its pod.
A pod with a claim of the driver's class is allocated by kube-scheduler, prepared by the kubelet
through the driver (its CDI edits reach the container) and runs: the exporter shows the device,
the claim and the pod as the API holds them. The pod deleted, the claim is deallocated by
kube-controller-manager and the device is free again. The driver stopped: a pod scheduled in the
kubelet's grace (its slices stay 30 s) is bound with its claim allocated and reserved, and never
starts, as the kubelet cannot prepare it; after the grace the kubelet wipes the slices, the pool
is gone, and the allocations left behind are orphaned.

The kubelet is a second judge through a claim's life and through the driver's death: the claims
it counts prepared for the driver (``dra_resource_claims_in_use``) are those the exporter shows
reserved on the node for the driver's devices, less those of pods waiting, not started. The pod
kept running holds its claim prepared after the driver is gone; the stranded one's claim is
reserved but never prepared.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.e2e.harness import wait_until
from tests.e2e.simworld import sample_values, samples, values
from tests.node import driver
from tests.node.cluster import NODE, Node, http_get
from tests.node.driver import Driver

pytestmark = pytest.mark.slow
NAMESPACE = "dra-view"
"""The exporter's."""
WORK = "dra-work"
"""The claims' and their pods'."""
RELEASE = "dra-view"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{WORK}/resourceclaims"
PODS = f"/api/v1/namespaces/{WORK}/pods"
WIPE_GRACE = 30
"""Seconds the kubelet keeps the slices of a driver gone (its defaultWipingDelay)."""
IN_USE = "dra_resource_claims_in_use"
"""The kubelet's count of the claims it has prepared, by driver: a second judge of the exporter."""


@attrs.define
class View:
    """What the exporter, installed by the chart, says of the cluster now."""

    node: Node

    def scrape(self) -> str:
        pod = self.node.ready_pod(NAMESPACE, SELECTOR)
        code, body = http_get(f"http://{pod['status']['podIP']}:8080/metrics", gzipped=True)
        assert code == 200, body[:2000]
        return body.decode()


@pytest.fixture(scope="module")
def view(node: Node) -> Iterator[View]:
    """The chart installed with pods listed (the Pod view), and the claims' namespace."""
    resources = "{resourceclaims,resourceslices,deviceclasses,pods}"
    node.install(
        RELEASE,
        NAMESPACE,
        "--set",
        f"exporter.resources={resources}",
    )
    node.kube.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WORK}}
    )
    driver.ensure_class(node.kube)
    yield View(node)
    node.helm("uninstall", RELEASE, "--namespace", NAMESPACE)


@pytest.fixture
def running(node: Node, view: View) -> Iterator[Driver]:
    """The driver running, its pool published; after the test, whatever it left released."""
    started = Driver(node)
    started.start()
    yield started
    if started.process is None:  # a pod prepared by it can only be released by it
        started.start()
    for pod in node.kube.get(PODS)["items"]:
        node.kube.delete(f"{PODS}/{pod['metadata']['name']}")
    wait_until(lambda: not node.kube.get(PODS)["items"], 120, "the tests' pods gone")
    for claim in node.kube.get(CLAIMS)["items"]:
        node.kube.delete(f"{CLAIMS}/{claim['metadata']['name']}")
    started.stop()


def make(node: Node, name: str) -> dict[str, Any]:
    """A claim *name* for one of the driver's devices, and a pod *name* using it."""
    node.kube.create(CLAIMS, driver.claim(name))
    created: dict[str, Any] = node.kube.create(PODS, driver.pod(name, name))
    return created


def api_view(node: Node) -> dict[str, Any]:
    """The devices, allocations and reservations as the API holds them."""
    claims = node.kube.get(CLAIMS)["items"]
    return {
        "devices": sorted(
            (s["spec"]["pool"]["name"], d["name"])
            for s in driver.Driver(node).slices()
            for d in s["spec"].get("devices", [])
        ),
        "allocated": sorted(
            (c["metadata"]["name"], r["pool"], r["device"])
            for c in claims
            for r in ((c.get("status") or {}).get("allocation") or {})
            .get("devices", {})
            .get("results", [])
        ),
        "reserved": sorted(
            (c["metadata"]["name"], r["name"], r["uid"])
            for c in claims
            for r in (c.get("status") or {}).get("reservedFor", [])
        ),
    }


def exporter_view(body: str) -> dict[str, Any]:
    """The same, as the exporter writes it."""
    return {
        "devices": sorted(
            (s["pool"], s["device_name"])
            for s in samples(body, "kube_resourceslice_device_info")
            if s["driver"] == driver.NAME
        ),
        "allocated": sorted(
            (s["resourceclaim_name"], s["pool"], s["device_name"])
            for s in samples(body, "kube_resourceclaim_status_allocated_device")
            if s["namespace"] == WORK
        ),
        "reserved": sorted(
            (s["resourceclaim_name"], s["pod_name"], s["uid"])
            for s in samples(body, "kube_resourceclaim_status_reserved_for_pod")
            if s["namespace"] == WORK
        ),
    }


def device_states(body: str) -> dict[str, str]:
    return {
        s["device_name"]: s["state"]
        for s in samples(body, "kube_resourceslice_device_state")
        if s["driver"] == driver.NAME
    }


def agrees(node: Node, view: View) -> tuple[dict[str, Any], str] | None:
    """The exporter's view equal to the API's: both, and the exposition; None until then."""
    expected, body = api_view(node), view.scrape()
    return (expected, body) if exporter_view(body) == expected else None


def kubelet_in_use(node: Node) -> float:
    """The claims the kubelet has prepared through the driver (``dra_resource_claims_in_use``)."""
    for labels, value in sample_values(node.kubelet_metrics("/metrics"), IN_USE):
        if labels.get("driver_name") == driver.NAME:
            return value
    return 0.0  # written once a claim of the driver was prepared


def exporter_in_use(body: str) -> float:
    """The claims the exporter says the kubelet holds prepared for the driver on the node.

    Those allocated the driver's devices on the node and reserved for a pod, less those reserved
    for a pod that waits, not started (``kube_pod_dra_not_started``, whose value is the time
    since which it waits, not 1): the kubelet could not prepare them. The API says when a pod
    started, not when its claims were prepared, which the kubelet does just before it makes the
    pod's sandbox: a pod starting counts for the kubelet a moment before the exporter reads it
    started, so the two are compared once settled.
    """

    def claims(family: str, **where: str) -> set[str]:
        return {
            s["resourceclaim_name"]
            for s in samples(body, family)
            if s["namespace"] == WORK and all(s[k] == v for k, v in where.items())
        }

    waiting = {
        labels["pod"]
        for labels, _ in values(body, "kube_pod_dra_not_started")
        if labels["namespace"] == WORK
    }
    held = {
        s["resourceclaim_name"]
        for s in samples(body, "kube_resourceclaim_status_reserved_for_pod")
        if s["namespace"] == WORK and s["pod_name"] not in waiting
    }
    return float(
        len(
            held
            & claims("kube_resourceclaim_status_state", state="reserved")
            & claims("kube_resourceclaim_allocation_node_info", node_name=NODE)
            & claims("kube_resourceclaim_allocation_result_info", driver=driver.NAME)
        )
    )


def judged_alike(node: Node, view: View, count: float) -> bool:
    """The kubelet and the exporter both count *count* claims prepared for the driver."""
    return kubelet_in_use(node) == count and exporter_in_use(view.scrape()) == count


def running_pod(node: Node, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = node.kube.get(f"{PODS}/{name}")
    statuses = pod["status"].get("containerStatuses") or []
    return pod if statuses and "running" in statuses[0]["state"] else None


def test_claim_prepared_then_released(node: Node, view: View, running: Driver) -> None:
    """Allocated by the scheduler, prepared through the driver, running; deleted, deallocated."""
    assert running.devices() == [f"device-{i:02d}" for i in range(driver.DEVICES)]
    make(node, "first")
    pod = wait_until(lambda: running_pod(node, "first"), 120, "the pod running")
    claim = node.kube.get(f"{CLAIMS}/first")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (driver.NAME, NODE)
    (reserved,) = claim["status"]["reservedFor"]
    assert (reserved["name"], reserved["uid"]) == ("first", pod["metadata"]["uid"])
    # Prepared through the driver: its CDI spec, applied by containerd to the container.
    environ = Path(f"/proc/{node.container_pids(pod)[0]}/environ").read_bytes().split(b"\0")
    assert b"claim_first_device=true" in environ
    assert driver.cdi_specs()

    expected, body = wait_until(lambda: agrees(node, view), 60, "the exporter as the API")
    assert expected["allocated"] == [("first", NODE, result["device"])]
    states = device_states(body)
    assert states.pop(result["device"]) == "allocated"
    assert set(states.values()) == {"available"}
    state = {
        s["resourceclaim_name"]: s["state"]
        for s in samples(body, "kube_resourceclaim_status_state")
        if s["namespace"] == WORK
    }
    assert state == {"first": "reserved"}
    wait_until(lambda: judged_alike(node, view, 1), 60, "the kubelet and the exporter: 1 in use")

    node.kube.delete(f"{PODS}/first")
    wait_until(lambda: not node.kube.get(PODS)["items"], 60, "the pod gone")

    def deallocated() -> bool:
        status = node.kube.get(f"{CLAIMS}/first").get("status") or {}
        return not status.get("allocation") and not status.get("reservedFor")

    wait_until(deallocated, 60, "the claim deallocated by the controller")
    assert not driver.cdi_specs()  # unprepared
    expected, body = wait_until(lambda: agrees(node, view), 60, "the exporter as the API")
    assert expected["allocated"] == [] and expected["reserved"] == []
    assert set(device_states(body).values()) == {"available"}
    wait_until(lambda: judged_alike(node, view, 0), 60, "the kubelet and the exporter: none")


def test_driver_stopped(node: Node, view: View, running: Driver) -> None:
    """A pod bound while the driver is gone never starts; the pool goes; allocations orphaned.

    The pod waits bound, its claim allocated and reserved for it, nothing running, and
    ``PodReadyToStartContainers`` False as the kubelet writes it; ``kube_pod_dra_not_started``
    gives the time since which it waits.
    """
    make(node, "kept")
    wait_until(lambda: running_pod(node, "kept"), 120, "the first pod running")
    running.stop()
    stopped = time.monotonic()
    stranded = make(node, "stranded")

    def bound_allocated_reserved() -> dict[str, Any] | None:
        pod = node.kube.get(f"{PODS}/stranded")
        status = node.kube.get(f"{CLAIMS}/stranded").get("status") or {}
        reserved = [(r["name"], r["uid"]) for r in status.get("reservedFor", [])]
        if pod["spec"].get("nodeName") != NODE or not status.get("allocation"):
            return None
        return pod if reserved == [("stranded", pod["metadata"]["uid"])] else None

    wait_until(bound_allocated_reserved, 60, "the pod bound, its claim allocated and reserved")
    assert time.monotonic() - stopped < WIPE_GRACE, "allocated after the kubelet's grace"

    def refused() -> list[dict[str, Any]] | None:
        events = node.kube.get(f"/api/v1/namespaces/{WORK}/events")["items"]
        return [
            e
            for e in events
            if e["involvedObject"]["name"] == "stranded"
            and e["reason"] == "FailedPrepareDynamicResources"
        ] or None

    wait_until(refused, 60, "the kubelet failing to prepare the claim")
    pod = node.kube.get(f"{PODS}/stranded")
    assert pod["status"]["phase"] == "Pending", pod["status"]
    assert not any("running" in s["state"] for s in pod["status"].get("containerStatuses", []))
    conditions = {c["type"]: c for c in pod["status"]["conditions"]}
    assert conditions["PodReadyToStartContainers"]["status"] == "False", conditions
    # The kubelet holds the first claim prepared, not the stranded one: nor does the exporter.
    wait_until(lambda: judged_alike(node, view, 1), 60, "the kubelet and the exporter: 1 in use")

    # The kubelet wipes the slices of a driver gone for its grace: the pool is gone.
    wait_until(lambda: not running.slices(), WIPE_GRACE + 60, "the driver's slices wiped")
    expected, body = wait_until(lambda: agrees(node, view), 60, "the exporter as the API")
    assert expected["devices"] == []
    pools = [s for s in samples(body, "kube_resourcepool_state") if s["driver"] == driver.NAME]
    assert pools == []
    orphaned = sorted(
        s["resourceclaim_name"]
        for s in samples(body, "kube_resourceclaim_allocation_orphaned")
        if s["namespace"] == WORK
    )
    assert orphaned == ["kept", "stranded"]
    assert node.kube.get(f"{PODS}/stranded")["spec"]["nodeName"] == NODE

    # The pod view: waiting since it was bound, not started.
    waiting = [
        (labels, value)
        for labels, value in sample_values(body, "kube_pod_dra_not_started")
        if labels.get("namespace") == WORK
    ]
    created = datetime.fromisoformat(stranded["metadata"]["creationTimestamp"]).timestamp()
    assert [labels for labels, _ in waiting] == [
        {
            "namespace": WORK,
            "pod": "stranded",
            "uid": stranded["metadata"]["uid"],
            "node_name": NODE,
        }
    ], waiting
    assert created <= waiting[0][1] <= time.time(), (created, waiting)
    assert kubelet_in_use(node) == exporter_in_use(body) == 1.0  # the pool gone, still prepared
