"""The Pod view, with kube-scheduler as the judge: demand no claim shows, why, device health.

A simulated cluster of its own (tests/e2e/simulated.py): one Node with two GPUs, a DeviceClass
that serves them as the extended resource ``example.com/gpu``. Pods ask for it the old way
(``limits: {example.com/gpu: 1}``); the scheduler makes their claims just before binding. The
device health a kubelet would report is written into a bound pod's status, as the kubelet does.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import simworld as world
from tests.e2e.harness import Exporter, wait_until, write_kubeconfig
from tests.e2e.simulated import Simulated, start_simulated
from tests.e2e.simworld import device

pytestmark = pytest.mark.slow
NODE = "pods-a"
EXTENDED = "example.com/gpu"
TEMPLATES = f"{world.RESOURCE}/namespaces/{world.NAMESPACE}/resourceclaimtemplates"


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
        simulated.add_namespace(world.NAMESPACE)
        serving = world.device_class("pods-gpu", "gpu")
        serving["spec"]["extendedResourceName"] = EXTENDED
        kube.create(f"{world.RESOURCE}/deviceclasses", serving)
        kube.create(
            f"{world.RESOURCE}/resourceslices",
            world.pool_slice(
                NODE, NODE, NODE, devices=[device(NODE, "gpu-0"), device(NODE, "gpu-1")]
            ),
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
        ["--resources", f"{world.RESOURCES},pods", "--mode", mode],
        {"KUBECONFIG": str(config)},
    )


def scrape(running: Exporter) -> str:
    _, body = wait_until(lambda: world.ok(running.scrape()), 30, "a scrape")
    return body


def waiting(body: str) -> dict[str, tuple[str, str, float]]:
    return {
        row["pod"]: (row["resource"], row["deviceclass_name"], value)
        for row, value in world.values(body, "kube_pod_dra_extended_resource_request")
    }


def causes(body: str) -> dict[str, str]:
    return {row["pod"]: row["cause"] for row in world.samples(body, "kube_pod_dra_unschedulable")}


def owned_claims(body: str, pod: str) -> list[str]:
    return [
        row["resourceclaim_name"]
        for row in world.samples(body, "kube_resourceclaim_info")
        if row["owner_kind"] == "Pod" and row["owner_name"] == pod
    ]


def test_extended_demand_waits_then_moves_to_its_claim(cluster: Simulated, tmp_path: Path) -> None:
    """Both GPUs taken: a third pod waits with no claim, shown as demand with cause ``claims``.

    One holder deleted, the scheduler binds the waiting pod and makes its claim; the exporter
    (watch mode) moves it from waiting demand to the claim families.
    """
    for name in ("holder-0", "holder-1"):
        cluster.kube.create(world.PODS, world.extended_pod(name, EXTENDED))
        wait_until(partial(world.bound, cluster, name), world.SCHEDULED, f"{name} bound")
    cluster.kube.create(world.PODS, world.extended_pod("waiter", EXTENDED))
    condition = wait_until(
        partial(world.unschedulable, cluster, "waiter"), world.SCHEDULED, "waiter held"
    )
    assert "cannot allocate all claims" in condition["message"], condition
    assert not [
        c for c in cluster.kube.get(world.CLAIMS)["items"] if "waiter" in c["metadata"]["name"]
    ]
    running = exporter(cluster, tmp_path / "watch", "watch")
    try:
        body = scrape(running)
        assert waiting(body) == {"waiter": (EXTENDED, "pods-gpu", 1.0)}
        assert causes(body) == {"waiter": "claims"}
        for holder in ("holder-0", "holder-1"):
            assert len(owned_claims(body, holder)) == 1
        cluster.delete_pod(world.NAMESPACE, "holder-0")
        wait_until(
            partial(world.bound, cluster, "waiter"),
            world.SCHEDULED,
            "waiter bound once a GPU is free",
        )

        def moved() -> str | None:
            now = scrape(running)
            return now if owned_claims(now, "waiter") and "waiter" not in waiting(now) else None

        body = wait_until(moved, 10, "the waiter's demand shown as its claim")
        assert "waiter" not in causes(body)
        (made,) = owned_claims(body, "waiter")
        results = [r for r in world.samples(body, "kube_resourceclaim_allocation_result_info")]
        assert [r["pool"] for r in results if r["resourceclaim_name"] == made] == [NODE]
    finally:
        running.stop()
        cluster.delete_pods(world.NAMESPACE, "holder-0", "holder-1", "waiter")


def test_missing_class_and_device_health(cluster: Simulated, tmp_path: Path) -> None:
    """A pod whose claim's class does not exist shows ``class_missing``.

    A bound pod's device health, written into its status as the kubelet writes it, shows per
    device.
    """
    cluster.kube.create(world.PODS, template_pod("no-class", "pods-nope"))
    cluster.kube.create(world.PODS, template_pod("sick", "pods-gpu"))
    condition = wait_until(
        partial(world.unschedulable, cluster, "no-class"), world.SCHEDULED, "no-class held"
    )
    assert "does not exist" in condition["message"], condition
    wait_until(partial(world.bound, cluster, "sick"), world.SCHEDULED, "sick bound")
    made = cluster.kube.get(f"{world.PODS}/sick")["status"]["resourceClaimStatuses"][0][
        "resourceClaimName"
    ]
    (result,) = cluster.kube.get(f"{world.CLAIMS}/{made}")["status"]["allocation"]["devices"][
        "results"
    ]
    device = f"{result['driver']}/{result['pool']}/{result['device']}"
    pod = cluster.kube.get(f"{world.PODS}/sick")
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
    cluster.kube.put(f"{world.PODS}/sick/status", pod)
    running = exporter(cluster, tmp_path / "list", "list")
    try:
        body = scrape(running)
        assert causes(body).get("no-class") == "class_missing"
        health = world.samples(body, "kube_pod_dra_device_health")
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
        ] == [("sick", "c", made, "", world.DRIVER, NODE, result["device"], "unhealthy")]
    finally:
        running.stop()
        cluster.delete_pods(world.NAMESPACE, "no-class", "sick")


STUCK = ("kube_pod_dra_unschedulable", "kube_pod_dra_not_started")
"""The families the listing and the watching exporters are compared on."""


@pytest.fixture()
def exporters(cluster: Simulated, tmp_path: Path) -> Iterator[tuple[Exporter, Exporter]]:
    """A listing exporter and a watching one, each with the Pod view."""
    started = [exporter(cluster, tmp_path / mode, mode) for mode in ("list", "watch")]
    yield started[0], started[1]
    for running in started:
        running.stop()


def explicit_pod(name: str, claim_name: str, **spec: Any) -> dict[str, Any]:
    """A pod using the claim *claim_name*, made by its user (not from a template)."""
    made = template_pod(name, "unused")
    made["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    made["spec"].update(spec)
    return made


def made_claim(cluster: Simulated, name: str) -> str | None:
    """The claim the controller manager made for pod *name*'s template, once it has."""
    made = (
        cluster.kube.get(f"{world.PODS}/{name}").get("status", {}).get("resourceClaimStatuses", [])
    )
    return str(made[0]["resourceClaimName"]) if made else None


def test_every_pod_waiting_unbound_is_named(
    cluster: Simulated, exporters: tuple[Exporter, Exporter]
) -> None:
    """A template's claim not made yet, a claim no scheduler judges, a claim that cannot fit.

    The controller manager paused, a template pod has no claim and the scheduler holds it back
    saying nothing: ``claim_missing``. A pod whose scheduler does not run has its explicit claim
    pending and no verdict: ``claim_pending``. One whose explicit claim asks for more than the
    node has is judged by the scheduler: ``claims``. The controller manager resumed, the first
    is bound and leaves the family.
    """
    manager = cluster.components[1]  # start_simulated starts the scheduler, then the manager
    assert "kube-controller-manager" in str(manager.args)
    kube = cluster.kube
    try:
        os.kill(manager.pid, signal.SIGSTOP)
        try:
            kube.create(world.PODS, template_pod("unmade", "pods-gpu"))
            kube.create(world.CLAIMS, world.claim("unheard", "pods-gpu", count=1))
            kube.create(
                world.PODS, explicit_pod("unheard", "unheard", schedulerName="no-such-scheduler")
            )
            kube.create(world.CLAIMS, world.claim("too-many", "pods-gpu", count=3))
            kube.create(world.PODS, explicit_pod("too-many", "too-many"))
            condition = wait_until(
                partial(world.unschedulable, cluster, "too-many"),
                world.SCHEDULED,
                "too-many judged",
            )
            assert "cannot allocate all claims" in condition["message"], condition
            assert world.unschedulable(cluster, "unheard") is None  # another scheduler's pod
            assert world.unschedulable(cluster, "unmade") is None  # held back before scheduling
            assert made_claim(cluster, "unmade") is None
            body = world.settled(exporters, STUCK, "the three named", lambda b: len(causes(b)) == 3)
            assert causes(body) == {
                "unmade": "claim_missing",
                "unheard": "claim_pending",
                "too-many": "claims",
            }
        finally:
            os.kill(manager.pid, signal.SIGCONT)
        wait_until(
            partial(world.bound, cluster, "unmade"),
            world.SCHEDULED,
            "unmade bound, its claim made",
        )
        body = world.settled(
            exporters, STUCK, "the bound pod gone", lambda b: "unmade" not in causes(b)
        )
        assert causes(body) == {"unheard": "claim_pending", "too-many": "claims"}
    finally:
        world.remove(cluster, ["unmade", "unheard", "too-many"])


def kubelet_status(
    pod: dict[str, Any], started: bool, condition: bool = True, since: str = ""
) -> dict[str, Any]:
    """The pod's status as a kubelet writes it: waiting for its sandbox, or running.

    With *condition*, the kubelet writes ``PodReadyToStartContainers`` (since *since*), as
    kubelets do since 1.29; without, it writes the containers' states alone.
    """
    status = pod["status"]
    scheduled = [c for c in status["conditions"] if c["type"] == "PodScheduled"]
    state = (
        {"running": {"startedAt": since}}
        if started
        else {"waiting": {"reason": "ContainerCreating"}}
    )
    ready = "True" if started else "False"
    kubelet = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": since},
        {"type": "Ready", "status": ready, "lastTransitionTime": since},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": since},
    ]
    if condition:
        sandbox = {
            "type": "PodReadyToStartContainers",
            "status": ready,
            "lastTransitionTime": since,
        }
        if not started:
            sandbox["reason"] = "PodSandboxNotReady"
        kubelet.insert(0, sandbox)
    status.update(
        {
            "phase": "Running" if started else "Pending",
            "hostIP": "10.0.0.7",
            "startTime": since,
            "conditions": [*kubelet, *scheduled],
            "containerStatuses": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "imageID": "",
                    "ready": started,
                    "started": started,
                    "restartCount": 0,
                    "state": state,
                }
            ],
        }
    )
    return pod


def not_started(body: str) -> dict[tuple[str, str], float]:
    return {
        (labels["pod"], labels["node_name"]): value
        for labels, value in world.values(body, "kube_pod_dra_not_started")
    }


def test_bound_pods_whose_devices_are_not_prepared(
    cluster: Simulated, exporters: tuple[Exporter, Exporter]
) -> None:
    """Bound, its claim allocated and reserved, not started: as two kubelets write it.

    One writes ``PodReadyToStartContainers=False`` (waiting since it did), the other no such
    condition and its container waiting (since the pod was bound); once each says the pod
    runs, neither is written.
    """
    kube = cluster.kube
    for name in ("unprepared", "old-kubelet"):
        kube.create(world.PODS, template_pod(name, "pods-gpu"))
    try:
        for name in ("unprepared", "old-kubelet"):
            assert (
                wait_until(partial(world.bound, cluster, name), world.SCHEDULED, f"{name} bound")
                == NODE
            )
        placed = next(
            c["lastTransitionTime"]
            for c in kube.get(f"{world.PODS}/old-kubelet")["status"]["conditions"]
            if c["type"] == "PodScheduled"
        )
        since = "2026-12-01T08:00:00Z"
        for name, condition in (("unprepared", True), ("old-kubelet", False)):
            pod = kube.get(f"{world.PODS}/{name}")
            kube.put(f"{world.PODS}/{name}/status", kubelet_status(pod, False, condition, since))
        body = world.settled(
            exporters,
            STUCK,
            "both written",
            lambda b: {"unprepared", "old-kubelet"} <= {pod for pod, _ in not_started(b)},
        )
        waiting = not_started(body)
        assert waiting[("unprepared", NODE)] == seconds(since)
        assert waiting[("old-kubelet", NODE)] == seconds(placed)
        assert not causes(body)
        for name, condition in (("unprepared", True), ("old-kubelet", False)):
            pod = kube.get(f"{world.PODS}/{name}")
            kube.put(f"{world.PODS}/{name}/status", kubelet_status(pod, True, condition, since))
        world.settled(
            exporters,
            STUCK,
            "both started",
            lambda b: not {"unprepared", "old-kubelet"} & {pod for pod, _ in not_started(b)},
        )
    finally:
        cluster.delete_pods(world.NAMESPACE, "unprepared", "old-kubelet")


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
