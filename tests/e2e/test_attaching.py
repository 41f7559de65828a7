"""Devices a driver attaches before the pod may bind, and devices it takes out of its slices.

A simulated cluster of its own (tests/e2e/simulated.py): one Node, two ports whose slice carries
binding conditions (``attached``, failure ``attach-failed``: a device wired to the node by its
driver after allocation), and two NICs of a network driver.  kube-scheduler 1.37.2, its
``DynamicResources`` binding timeout cut to :data:`TIMEOUT` seconds (it is 600 by default) so
that giving up can be seen, allocates the ports and waits; the test acts as the port driver,
writing the claim's ``status.devices`` as a driver does, and as the network driver, republishing
its slice without the NIC it lent.  Two exporters, one listing and one watching, both with the
Pod view and ``--hides-allocated-devices`` naming the network driver, must write the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import simworld as world
from tests.e2e.controlplane import APIError, Kube
from tests.e2e.harness import Exporter, wait_until
from tests.e2e.simulated import Simulated, start_simulated
from tests.objects import resource_slice

pytestmark = pytest.mark.slow
NODE = "attach-a"
NIC_DRIVER = "nic.sim.example"
NICS = f"{world.RESOURCE}/resourceslices/{NODE}-nics"
TIMEOUT = 20
"""kube-scheduler's binding timeout here, in seconds."""
FAMILIES = (
    "kube_resourceclaim_allocation_binding",
    "kube_resourceclaim_allocation_binding_failed",
    "kube_resourceclaim_allocation_orphaned",
    "kube_resourceclaim_status_state",
    "kube_resourceclaim_status_allocation_timestamp_seconds",
    "kube_pod_dra_unschedulable",
    "kube_pod_dra_not_started",
)
"""The families the two exporters are compared on."""


def port(name: str) -> dict[str, Any]:
    return world.gpu(
        NODE,
        name,
        "port",
        bindsToNode=True,
        bindingConditions=["attached"],
        bindingFailureConditions=["attach-failed"],
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    timeout = {"name": "DynamicResources", "args": {"bindingTimeout": f"{TIMEOUT}s"}}
    simulated = start_simulated(
        tmp_path_factory.mktemp("attaching"), profile={"pluginConfig": [timeout]}
    )
    kube = simulated.kube
    try:
        simulated.add_node(NODE)
        simulated.add_namespace(world.NAMESPACE)
        kube.create(f"{world.RESOURCE}/deviceclasses", world.device_class("attach-port", "port"))
        kube.create(
            f"{world.RESOURCE}/deviceclasses",
            world.class_selecting("attach-nic", f'device.driver == "{NIC_DRIVER}"'),
        )
        kube.create(
            f"{world.RESOURCE}/resourceslices",
            world.pool_slice(f"{NODE}-ports", NODE, NODE, devices=[port("port-0"), port("port-1")]),
        )
        nics = [{"name": f"nic-{index}"} for index in range(2)]
        kube.create(
            f"{world.RESOURCE}/resourceslices",
            resource_slice(f"{NODE}-nics", nics, NIC_DRIVER, NODE, nodeName=NODE),
        )
        yield simulated
    finally:
        simulated.stop()


@pytest.fixture(scope="module")
def exporters(
    cluster: Simulated, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Exporter, Exporter]]:
    """A listing exporter and a watching one, with the Pod view, the network driver named."""
    args = ("--resources", f"{world.RESOURCES},pods", "--hides-allocated-devices", NIC_DRIVER)
    started = [
        world.exporter(cluster, tmp_path_factory.mktemp(f"attaching-{mode}"), mode, *args)
        for mode in ("list", "watch")
    ]
    yield started[0], started[1]
    for running in started:
        running.stop()


def placed(cluster: Simulated, name: str) -> dict[str, Any] | None:
    """Claim *name*, once allocated and reserved for its pod while the pod is not bound."""
    got = cluster.kube.get(f"{world.CLAIMS}/{name}")
    status = got.get("status", {})
    if (
        status.get("allocation")
        and status.get("reservedFor")
        and world.bound(cluster, name) is None
    ):
        return dict(got)
    return None


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def write_conditions(kube: Kube, name: str, device: str, **conditions: str) -> None:
    """Write the port's conditions into claim *name*'s status, as its driver does."""
    for _ in range(5):
        got = kube.get(f"{world.CLAIMS}/{name}")
        got["status"]["devices"] = [
            {
                "driver": world.DRIVER,
                "pool": NODE,
                "device": device,
                "conditions": [
                    {
                        "type": kind,
                        "status": status,
                        "reason": "Attached" if status == "True" else "Attaching",
                        "message": "",
                        "lastTransitionTime": "2026-12-01T00:00:00Z",
                    }
                    for kind, status in conditions.items()
                ],
            }
        ]
        try:
            kube.put(f"{world.CLAIMS}/{name}/status", got)
            return
        except APIError as error:
            if error.code != 409:  # the scheduler wrote the claim meanwhile
                raise
    raise AssertionError(f"claim {name}'s status kept changing under the driver")


def binding(body: str, family: str, claim_name: str) -> set[tuple[str, str]]:
    return {
        (row["device_name"], row["condition"])
        for row in world.samples(body, family)
        if row["resourceclaim_name"] == claim_name
    }


def pods_in(body: str, family: str) -> set[str]:
    return {labels["pod"] for labels, _ in world.values(body, family)}


def said(cluster: Simulated, pod_name: str, reason: str) -> list[str]:
    """The notes of the scheduler's events of *reason* about pod *pod_name*."""
    got = cluster.kube.get(f"/apis/events.k8s.io/v1/namespaces/{world.NAMESPACE}/events")
    return [
        event.get("note", "")
        for event in got["items"]
        if event["regarding"]["name"] == pod_name and event["reason"] == reason
    ]


def scheduler_failures(cluster: Simulated) -> list[float]:
    """kube-scheduler's count of failed bindings of the port driver's devices."""
    return [
        sample.value
        for family in text_string_to_metric_families(cluster.metrics("kube-scheduler"))
        for sample in family.samples
        if sample.name == "scheduler_dra_bindingconditions_allocations_total"
        and sample.labels["driver"] == world.DRIVER
        and sample.labels["status"] == "failure"
    ]


def test_a_device_binds_once_its_driver_says_attached(
    cluster: Simulated, exporters: tuple[Exporter, Exporter]
) -> None:
    """Allocated and reserved, the pod not bound: ``attached`` is written until the driver sets it.

    The claim reads ``reserved`` throughout; the pod is neither unschedulable nor not started
    while it waits, and once bound (no kubelet runs here) it waits to start since it was bound.
    """
    cluster.kube.create(world.CLAIMS, world.claim("late", "attach-port", count=1))
    cluster.kube.create(world.PODS, world.pod("late", {"resourceClaimName": "late"}))
    try:
        held = wait_until(
            partial(placed, cluster, "late"), world.SCHEDULED, "late placed, not bound"
        )
        (result,) = held["status"]["allocation"]["devices"]["results"]
        assert (result["bindingConditions"], result["bindingFailureConditions"]) == (
            ["attached"],
            ["attach-failed"],
        )  # copied from the slice by the allocator
        notes = wait_until(
            partial(said, cluster, "late", "BindingConditionsPending"),
            world.SCHEDULED,
            "the scheduler saying it waits",
        )
        assert notes == [f"waiting for binding conditions for device on node {NODE}"]
        body = world.settled(
            exporters,
            FAMILIES,
            "the binding written",
            lambda b: binding(b, "kube_resourceclaim_allocation_binding", "late"),
        )
        assert binding(body, "kube_resourceclaim_allocation_binding", "late") == {
            (result["device"], "attached")
        }
        assert not binding(body, "kube_resourceclaim_allocation_binding_failed", "late")
        assert ("late", "reserved") in {
            (row["resourceclaim_name"], row["state"])
            for row in world.samples(body, "kube_resourceclaim_status_state")
        }
        allocated = {
            labels["resourceclaim_name"]: value
            for labels, value in world.values(
                body, "kube_resourceclaim_status_allocation_timestamp_seconds"
            )
        }
        assert allocated["late"] == seconds(held["status"]["allocation"]["allocationTimestamp"])
        assert "late" not in pods_in(body, "kube_pod_dra_unschedulable")
        assert "late" not in pods_in(body, "kube_pod_dra_not_started")

        write_conditions(cluster.kube, "late", result["device"], attached="True")
        node = wait_until(
            partial(world.bound, cluster, "late"), world.SCHEDULED, "late bound once attached"
        )
        assert node == NODE
        body = world.settled(
            exporters,
            FAMILIES,
            "the binding gone",
            lambda b: not binding(b, "kube_resourceclaim_allocation_binding", "late"),
        )
        placed_at = next(
            c["lastTransitionTime"]
            for c in cluster.kube.get(f"{world.PODS}/late")["status"]["conditions"]
            if c["type"] == "PodScheduled" and c["status"] == "True"
        )
        assert {
            (labels["pod"], labels["node_name"]): value
            for labels, value in world.values(body, "kube_pod_dra_not_started")
        }[("late", NODE)] == seconds(placed_at)
    finally:
        world.remove(cluster, ["late"])


def test_a_failed_binding_shows_until_the_scheduler_starts_over(
    cluster: Simulated, exporters: tuple[Exporter, Exporter]
) -> None:
    """The driver sets ``attach-failed``: written until the scheduler deallocates the claim.

    kube-scheduler notices within its 5-second poll, fails the pod's binding, and at its next
    attempt deallocates the claim (its device status cleared) and allocates it again: the
    binding condition is written again, the failure no more, the pod is placed, not
    unschedulable.
    """
    cluster.kube.create(world.CLAIMS, world.claim("fails", "attach-port", count=1))
    cluster.kube.create(world.PODS, world.pod("fails", {"resourceClaimName": "fails"}))
    try:
        held = wait_until(partial(placed, cluster, "fails"), world.SCHEDULED, "fails placed")
        (result,) = held["status"]["allocation"]["devices"]["results"]
        write_conditions(
            cluster.kube, "fails", result["device"], attached="False", **{"attach-failed": "True"}
        )
        watching = exporters[1]  # follows each change; the failure lasts seconds
        failed = wait_until(
            lambda: binding(
                world.body_of(watching), "kube_resourceclaim_allocation_binding_failed", "fails"
            ),
            world.SCHEDULED,
            "the failure written",
        )
        assert failed == {(result["device"], "attach-failed")}

        def started_over() -> dict[str, Any] | None:
            again = placed(cluster, "fails")
            return again if again and not again["status"].get("devices") else None

        wait_until(started_over, world.SCHEDULED, "the claim deallocated and allocated again")
        notes = said(cluster, "fails", "FailedScheduling")
        assert any("device binding failed: claim=fails" in note for note in notes), notes
        assert any("deallocation of ResourceClaim completed" in note for note in notes), notes
        body = world.settled(
            exporters,
            FAMILIES,
            "the failure gone, the binding back",
            lambda b: (
                not binding(b, "kube_resourceclaim_allocation_binding_failed", "fails")
                and binding(b, "kube_resourceclaim_allocation_binding", "fails")
            ),
        )
        assert "fails" not in pods_in(body, "kube_pod_dra_unschedulable")
        assert scheduler_failures(cluster) == [1.0]
    finally:
        world.remove(cluster, ["fails"])


def test_the_scheduler_gives_up_when_the_allocation_is_a_timeout_old(
    cluster: Simulated, exporters: tuple[Exporter, Exporter]
) -> None:
    """Never attached: the scheduler starts over a timeout after the ``allocationTimestamp``.

    It allocates again no sooner than that: the clock DRADeviceBindingSlow reads.
    """
    cluster.kube.create(world.CLAIMS, world.claim("never", "attach-port", count=1))
    cluster.kube.create(world.PODS, world.pod("never", {"resourceClaimName": "never"}))
    try:
        held = wait_until(partial(placed, cluster, "never"), world.SCHEDULED, "never placed")
        first = seconds(held["status"]["allocation"]["allocationTimestamp"])

        def again() -> float | None:
            claimed = placed(cluster, "never")
            stamp = claimed and seconds(claimed["status"]["allocation"]["allocationTimestamp"])
            return stamp if stamp and stamp != first else None

        second = wait_until(again, TIMEOUT + world.SCHEDULED, "the scheduler starting over")
        assert second - first >= TIMEOUT - 1  # whole seconds, each rounded down
        body = world.settled(
            exporters,
            FAMILIES,
            "the new allocation's time",
            lambda b: (
                ("never", second)
                in {
                    (labels["resourceclaim_name"], value)
                    for labels, value in world.values(
                        b, "kube_resourceclaim_status_allocation_timestamp_seconds"
                    )
                }
            ),
        )
        assert binding(body, "kube_resourceclaim_allocation_binding", "never")
    finally:
        world.remove(cluster, ["never"])


def orphaned(body: str) -> set[tuple[str, str, str, str]]:
    return {
        (row["resourceclaim_name"], row["driver"], row["device_name"], row["reason"])
        for row in world.samples(body, "kube_resourceclaim_allocation_orphaned")
    }


def test_a_nic_its_driver_hides_while_allocated(
    cluster: Simulated, exporters: tuple[Exporter, Exporter], tmp_path: Path
) -> None:
    """The network driver republishes its pool without the NIC it lent: hidden, not gone.

    An exporter not told that the driver does so reads the NIC gone; with the pool deleted,
    both read the pool gone.
    """
    kube = cluster.kube
    kube.create(world.CLAIMS, world.claim("rdma", "attach-nic", count=1))
    kube.create(world.PODS, world.pod("rdma", {"resourceClaimName": "rdma"}))
    plain = world.exporter(cluster, tmp_path, "list", "--resources", f"{world.RESOURCES},pods")
    try:
        wait_until(partial(world.bound, cluster, "rdma"), world.SCHEDULED, "rdma bound")
        (result,) = kube.get(f"{world.CLAIMS}/rdma")["status"]["allocation"]["devices"]["results"]
        lent = result["device"]
        nics = kube.get(NICS)
        nics["spec"]["pool"]["generation"] += 1
        nics["spec"]["devices"] = [d for d in nics["spec"]["devices"] if d["name"] != lent]
        kube.put(NICS, nics)
        body = world.settled(
            exporters, FAMILIES, "the NIC hidden", lambda b: "rdma" in {o[0] for o in orphaned(b)}
        )
        assert orphaned(body) == {("rdma", NIC_DRIVER, lent, "hidden_by_driver")}
        _, told_nothing = wait_until(lambda: world.ok(plain.scrape()), world.SCHEDULED, "a scrape")
        assert orphaned(told_nothing) == {("rdma", NIC_DRIVER, lent, "device_gone")}

        kube.delete(NICS)
        body = world.settled(
            exporters,
            FAMILIES,
            "the pool gone",
            lambda b: orphaned(b) == {("rdma", NIC_DRIVER, lent, "pool_gone")},
        )
        _, told_nothing = wait_until(lambda: world.ok(plain.scrape()), world.SCHEDULED, "a scrape")
        assert orphaned(told_nothing) == orphaned(body)
    finally:
        plain.stop()
        world.remove(cluster, ["rdma"])
