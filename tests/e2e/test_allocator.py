"""The real allocator as the judge: kube-scheduler allocates, the exporter must agree.

A simulated cluster of its own (tests/e2e/simulated.py): two Nodes, whole GPUs, a partitionable
GPU whose MIG devices consume shared counters, an incomplete pool, an invalid pool (a device
name published twice) and a NoSchedule DeviceTaintRule.  Pods with a ResourceClaimTemplate and
an explicit claim are scheduled by kube-scheduler; the test writes no status.  The exporter's
allocations must be the scheduler's, and each device's state what the allocator implies: a
device is ``available`` exactly when a pod pinned to its node and asking for it is scheduled.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import simworld as world
from tests.e2e.harness import wait_until
from tests.e2e.simulated import Simulated, start_simulated

EVERY = world.counters(memory="40Gi", memory_slice_0="1", memory_slice_1="1", memory_slice_2="1")


def partition(index: int) -> dict[str, Any]:
    needs = world.counters(memory="10Gi", **{f"memory_slice_{index}": "1"})
    return world.gpu(
        "sim-a-mig",
        f"mig-{index}",
        "mig",
        consumesCounters=[{"counterSet": "gpu", "counters": needs}],
    )


SLICES = [
    world.pool_slice(
        "sim-a",
        "sim-a",
        "sim-a",
        devices=[world.gpu("sim-a", "gpu-0"), world.gpu("sim-a", "gpu-1")],
    ),
    world.pool_slice(
        "sim-a-mig-counters",
        "sim-a",
        "sim-a-mig",
        2,
        sharedCounters=[{"name": "gpu", "counters": EVERY}],
    ),
    world.pool_slice(
        "sim-a-mig-devices",
        "sim-a",
        "sim-a-mig",
        2,
        devices=[
            world.gpu(
                "sim-a-mig",
                "whole",
                consumesCounters=[{"counterSet": "gpu", "counters": EVERY}],
            ),
            *(partition(index) for index in range(3)),
        ],
    ),
    world.pool_slice(
        "sim-b",
        "sim-b",
        "sim-b",
        devices=[world.gpu("sim-b", "gpu-0"), world.gpu("sim-b", "gpu-1")],
    ),
    world.pool_slice(
        "sim-b-incomplete",
        "sim-b",
        "sim-b-incomplete",
        2,
        devices=[world.gpu("sim-b-incomplete", "gpu-0")],
    ),
    world.pool_slice(
        "sim-b-invalid-1",
        "sim-b",
        "sim-b-invalid",
        2,
        devices=[world.gpu("sim-b-invalid", "gpu-0")],
    ),
    world.pool_slice(
        "sim-b-invalid-2",
        "sim-b",
        "sim-b-invalid",
        2,
        devices=[world.gpu("sim-b-invalid", "gpu-0")],
    ),
]
NIC = {
    "name": "nic",
    "attributes": {"type": {"string": "nic"}, "uuid": {"string": "sim-b-nic/nic"}},
    "capacity": {
        "bandwidth": {
            "value": "100G",
            "requestPolicy": {"default": "10G", "validRange": {"min": "1G", "max": "100G"}},
        }
    },
    "allowMultipleAllocations": True,
}
"""A device shared by consumable capacity (DRAConsumableCapacity, served from 1.36 on)."""
SLICES.append(world.pool_slice("sim-b-nic", "sim-b", "sim-b-nic", devices=[NIC]))
TAINTED = ("sim-b", "gpu-0")
"""The device a NoSchedule DeviceTaintRule takes out of service."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("simulated"))
    kube = simulated.kube
    try:
        for node in ("sim-a", "sim-b"):
            simulated.add_node(node)
        simulated.add_namespace(world.NAMESPACE)
        for name, kind in (("sim-gpu", "gpu"), ("sim-mig", "mig"), ("sim-nic", "nic")):
            kube.create(f"{world.RESOURCE}/deviceclasses", world.device_class(name, kind))
        for made in SLICES:
            kube.create(f"{world.RESOURCE}/resourceslices", made)
        kube.create(
            f"{world.RESOURCE}/devicetaintrules",
            world.taint_rule(
                "maintenance",
                "example.com/maintenance",
                "NoSchedule",
                pool=TAINTED[0],
                device=TAINTED[1],
            ),
        )
        kube.create(
            f"{world.RESOURCE}/namespaces/{world.NAMESPACE}/resourceclaimtemplates",
            world.claim_template("one-gpu", "sim-gpu"),
        )
        kube.create(
            world.CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "one-partition"},
                "spec": world.claim_spec("sim-mig"),
            },
        )
        share = world.claim_spec("sim-nic")
        share["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"bandwidth": "30G"}}
        kube.create(
            world.CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "bandwidth"},
                "spec": share,
            },
        )
        kube.create(world.PODS, world.pod("trainer", {"resourceClaimTemplateName": "one-gpu"}))
        kube.create(world.PODS, world.pod("inference", {"resourceClaimName": "one-partition"}))
        kube.create(world.PODS, world.pod("streamer", {"resourceClaimName": "bandwidth"}))
        for name in ("trainer", "inference", "streamer"):
            wait_until(partial(world.bound, simulated, name), world.SCHEDULED, f"{name} scheduled")
        yield simulated
    finally:
        simulated.stop()


def device_states(body: str) -> dict[tuple[str, str], str]:
    return {
        (row["pool"], row["device_name"]): row["state"]
        for row in world.samples(body, "kube_resourceslice_device_state")
        if row["driver"] == world.DRIVER
    }


def implied(simulated: Simulated) -> dict[tuple[str, str], str]:
    """Each device's state as the allocator's rules and the scheduler's allocations imply."""
    allocated = world.allocated(simulated)
    tainted = {
        (rule["spec"]["deviceSelector"]["pool"], rule["spec"]["deviceSelector"]["device"])
        for rule in simulated.kube.get(f"{world.RESOURCE}/devicetaintrules")["items"]
    }
    states = {}
    for made in SLICES:
        pool = made["spec"]["pool"]["name"]
        for device in made["spec"].get("devices", []):
            key = (pool, device["name"])
            if key in allocated:
                states[key] = "allocated"
            elif pool in ("sim-b-incomplete", "sim-b-invalid"):
                states[key] = "unusable"
            elif key in tainted:
                states[key] = "tainted"
            elif (
                pool == "sim-a-mig"
                and device["name"] == "whole"
                and any(p == "sim-a-mig" for p, _ in allocated)
            ):
                states[key] = "blocked"
            else:
                states[key] = "available"
    return states


@pytest.mark.parametrize("mode", ["list", "watch"])
def test_allocations_are_the_schedulers(cluster: Simulated, tmp_path: Path, mode: str) -> None:
    """Every result, its node and reservedFor, as the scheduler wrote them, nothing else."""
    running = world.exporter(cluster, tmp_path, mode)
    try:
        _, body = wait_until(lambda: world.ok(running.scrape()), 30, "a scrape")
    finally:
        running.stop()
    wanted = set()
    reserved = set()
    for claim in world.claims(cluster):
        name = claim["metadata"]["name"]
        for result in claim["status"]["allocation"]["devices"]["results"]:
            wanted.add((name, result["request"], result["pool"], result["device"]))
        for consumer in claim["status"]["reservedFor"]:
            reserved.add((name, consumer["name"], consumer["uid"]))
    assert len(wanted) == 3 and len(reserved) == 3  # the generated claim and two explicit ones
    assert {
        (row["resourceclaim_name"], row["request"], row["pool"], row["device_name"])
        for row in world.samples(body, "kube_resourceclaim_allocation_result_info")
    } == wanted
    assert {
        (row["resourceclaim_name"], row["pod_name"], row["uid"])
        for row in world.samples(body, "kube_resourceclaim_status_reserved_for_pod")
    } == reserved
    nodes = {
        (row["pool"], row["device_name"]): row["node_name"]
        for row in world.samples(body, "kube_resourceslice_device_info")
    }
    for claim in world.claims(cluster):
        (owner,) = claim["status"]["reservedFor"]
        node = world.bound(cluster, owner["name"])
        for result in claim["status"]["allocation"]["devices"]["results"]:
            assert nodes[(result["pool"], result["device"])] == node
    (shared,) = cluster.kube.get(f"{world.CLAIMS}/bandwidth")["status"]["allocation"]["devices"][
        "results"
    ]
    assert shared["consumedCapacity"] == {"bandwidth": "30G"}
    assert {
        (row["device_name"], row["capacity"]): value
        for row, value in world.values(body, "kube_resourceslice_device_capacity_available")
    } == {("nic", "bandwidth"): 70e9}


def test_device_states_are_what_the_allocator_implies(cluster: Simulated, tmp_path: Path) -> None:
    """allocated, unusable, tainted, blocked, available: then the scheduler is asked each one.

    Every ``available`` device is given to a pod pinned to its node that asks for that device
    alone; every other device asked for that way leaves its pod unschedulable.
    """
    running = world.exporter(cluster, tmp_path, "list")
    try:
        _, body = wait_until(lambda: world.ok(running.scrape()), 30, "a scrape")
    finally:
        running.stop()
    states = device_states(body)
    assert states == implied(cluster)
    assert set(states.values()) == {"allocated", "unusable", "tainted", "blocked", "available"}
    nodes = {(made["spec"]["pool"]["name"]): made["spec"]["nodeName"] for made in SLICES}
    asked = {}
    for index, ((pool, name), state) in enumerate(sorted(states.items())):
        if state == "allocated":
            continue
        claim_name = f"ask-{index}"
        device_class_name = "sim-mig" if name.startswith("mig-") else "sim-gpu"
        cluster.kube.create(
            world.CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": claim_name},
                "spec": world.claim_spec(device_class_name, f"{pool}/{name}"),
            },
        )
        cluster.kube.create(
            world.PODS, world.pod(claim_name, {"resourceClaimName": claim_name}, nodes[pool])
        )
        asked[claim_name] = (pool, name, state)
    try:
        for claim_name, (pool, name, state) in asked.items():
            if state == "available":
                wait_until(
                    partial(world.bound, cluster, claim_name),
                    world.SCHEDULED,
                    f"{pool}/{name} allocated",
                )
                got = cluster.kube.get(f"{world.CLAIMS}/{claim_name}")["status"]["allocation"]
                assert [(r["pool"], r["device"]) for r in got["devices"]["results"]] == [
                    (pool, name)
                ]
            else:
                condition = wait_until(
                    partial(world.unschedulable, cluster, claim_name),
                    world.SCHEDULED,
                    f"{pool}/{name} ({state}) refused",
                )
                assert condition["reason"] == "Unschedulable", condition
                assert "allocation" not in cluster.kube.get(f"{world.CLAIMS}/{claim_name}").get(
                    "status", {}
                )
    finally:
        for claim_name in asked:
            cluster.delete_pod(world.NAMESPACE, claim_name)
            cluster.kube.delete(f"{world.CLAIMS}/{claim_name}")


def test_watch_follows_the_lifecycle(cluster: Simulated, tmp_path: Path) -> None:
    """A pod deleted: the controller deallocates, the garbage collector deletes the claim.

    The watch-mode exporter follows: the generated claim goes, its device is available again.
    Then a NoExecute DeviceTaintRule on the device an explicit claim holds: the eviction
    controller deletes the pod, the claim is deallocated, the device shows tainted.
    """
    running = world.exporter(cluster, tmp_path, "watch")
    try:
        _, body = wait_until(lambda: world.ok(running.scrape()), 30, "a synchronised scrape")
        generated = [
            claim["metadata"]["name"]
            for claim in world.claims(cluster)
            if claim["metadata"].get("ownerReferences", [{}])[0].get("name") == "trainer"
        ]
        (claim_name,) = generated
        (result,) = cluster.kube.get(f"{world.CLAIMS}/{claim_name}")["status"]["allocation"][
            "devices"
        ]["results"]
        device = (result["pool"], result["device"])
        assert device_states(body)[device] == "allocated"
        cluster.delete_pod(world.NAMESPACE, "trainer")

        def gone() -> bool:
            return cluster.kube.find(f"{world.CLAIMS}/{claim_name}") is None

        wait_until(gone, world.SCHEDULED, "the garbage collector deleting the generated claim")

        def followed() -> str | None:
            _, now = running.scrape()
            names = {
                row["resourceclaim_name"] for row in world.samples(now, "kube_resourceclaim_info")
            }
            return (
                now
                if claim_name not in names and device_states(now)[device] == "available"
                else None
            )

        followed_body = wait_until(followed, 10, "the exporter following the deletion")
        assert device_states(followed_body) == implied(cluster)

        (used,) = cluster.kube.get(f"{world.CLAIMS}/one-partition")["status"]["allocation"][
            "devices"
        ]["results"]
        cluster.kube.create(
            f"{world.RESOURCE}/devicetaintrules",
            world.taint_rule(
                "evict", "example.com/xid", "NoExecute", pool=used["pool"], device=used["device"]
            ),
        )

        def evicted() -> bool:
            meta = cluster.kube.get(f"{world.PODS}/inference")["metadata"]
            return "deletionTimestamp" in meta

        wait_until(evicted, world.SCHEDULED, "the eviction controller deleting the pod")
        cluster.delete_pod(world.NAMESPACE, "inference")  # as a kubelet would confirm it

        def released() -> str | None:
            _, now = running.scrape()
            deallocated = device_states(now)[(used["pool"], used["device"])] == "tainted"
            return now if deallocated else None  # allocated while the claim held it

        wait_until(released, world.SCHEDULED, "the exporter following the eviction")
        assert "allocation" not in cluster.kube.get(f"{world.CLAIMS}/one-partition").get(
            "status", {}
        )
        assert device_states(wait_until(released, world.SCHEDULED, "a scrape")) == implied(cluster)
    finally:
        running.stop()
