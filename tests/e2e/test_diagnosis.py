"""Why pending, and how many more fit: kube-scheduler is the judge of both.

A simulated cluster of its own (tests/e2e/simulated.py) with two Nodes: whole GPUs, a GPU in
dynamic MIG mode with one partition in use, a shareable NIC with a 30G share in use, an
incomplete pool and a tainted spare.  For each reason a claim is built and its pod must stay
Pending while the exporter names the reason; for each (node, class) the exporter's headroom must
be the number of one-device pods the scheduler places there one after another.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import simworld
from tests.e2e import simworld as world
from tests.e2e.controlplane import APIError
from tests.e2e.harness import wait_until
from tests.e2e.simulated import Simulated, start_simulated

SLICES_PATH = f"{world.RESOURCE}/resourceslices"
EVERY = world.counters(
    memory_slice_0="1", memory_slice_1="1", memory_slice_2="1", memory_slice_3="1"
)


def partition(name: str, *memory_slices: int) -> dict[str, Any]:
    needs = world.counters(**{f"memory_slice_{index}": "1" for index in memory_slices})
    return world.device(
        "diag-a-mig", name, "mig", consumesCounters=[{"counterSet": "gpu", "counters": needs}]
    )


SLICES = [
    world.pool_slice(
        "diag-a",
        "diag-a",
        "diag-a",
        devices=[world.device("diag-a", f"gpu-{index}", "gpu") for index in range(3)],
    ),
    world.pool_slice(
        "diag-a-mig-counters",
        "diag-a",
        "diag-a-mig",
        2,
        sharedCounters=[{"name": "gpu", "counters": EVERY}],
    ),
    world.pool_slice(
        "diag-a-mig-devices",
        "diag-a",
        "diag-a-mig",
        2,
        devices=[
            world.device(
                "diag-a-mig",
                "whole",
                "gpu",
                consumesCounters=[{"counterSet": "gpu", "counters": EVERY}],
            ),
            partition("mig-2g-0", 0, 1),
            *(partition(f"mig-1g-{index}", index) for index in range(4)),
        ],
    ),
    world.pool_slice(
        "diag-b-nic",
        "diag-b",
        "diag-b-nic",
        devices=[
            world.device(
                "diag-b-nic",
                "nic",
                "nic",
                allowMultipleAllocations=True,
                capacity={
                    "bandwidth": {
                        "value": "100G",
                        "requestPolicy": {
                            "default": "10G",
                            "validRange": {"min": "1G", "max": "100G"},
                        },
                    }
                },
            )
        ],
    ),
    world.pool_slice(
        "diag-b-incomplete",
        "diag-b",
        "diag-b-incomplete",
        2,
        devices=[world.device("diag-b-incomplete", "gpu-0", "gpu")],
    ),
    world.pool_slice(
        "diag-b",
        "diag-b",
        "diag-b",
        devices=[
            world.device(
                "diag-b",
                "spare-0",
                "spare",
                taints=[{"key": "example.com/burn-in", "effect": "NoSchedule"}],
            )
        ],
    ),
    world.pool_slice(
        "diag-b-lost", "diag-b", "diag-b-lost", devices=[world.device("diag-b-lost", "x", "lost")]
    ),
]
KINDS = ("gpu", "mig", "nic", "spare", "lost")


def run(cluster: Simulated, name: str, made: dict[str, Any], **where: Any) -> None:
    """A claim and a pod of the same name that uses it."""
    cluster.kube.create(world.CLAIMS, made)
    cluster.kube.create(
        world.PODS, world.pod(name, {"resourceClaimName": name}, **{"cpu": "100m", **where})
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("diagnosis"))
    kube = simulated.kube
    try:
        for node in ("diag-a", "diag-b"):
            simulated.add_node(node)
        simulated.add_namespace(world.NAMESPACE)
        for kind in KINDS:
            kube.create(f"{world.RESOURCE}/deviceclasses", world.device_class(f"diag-{kind}", kind))
        for made in SLICES:
            kube.create(SLICES_PATH, made)
        run(simulated, "held-partition", world.claim("held-partition", "diag-mig"))
        share = world.claim("held-share", "diag-nic", capacity={"requests": {"bandwidth": "30G"}})
        run(simulated, "held-share", share)
        run(simulated, "held-lost", world.claim("held-lost", "diag-lost"))
        for name in ("held-partition", "held-share", "held-lost"):
            wait_until(partial(world.bound, simulated, name), world.SCHEDULED, f"{name} scheduled")
        yield simulated
    finally:
        simulated.stop()


def held(cluster: Simulated, name: str) -> str:
    """The device the scheduler gave claim *name*."""
    (result,) = cluster.kube.get(f"{world.CLAIMS}/{name}")["status"]["allocation"]["devices"][
        "results"
    ]
    return str(result["device"])


def reasons(body: str) -> dict[str, str]:
    return {
        row["resourceclaim_name"]: row["reason"]
        for row in world.samples(body, "kube_resourceclaim_pending_reason")
    }


TYPE = f'device.attributes["{world.DRIVER}"]'


def test_each_reason_and_the_scheduler_agrees(cluster: Simulated, tmp_path: Path) -> None:
    """A claim built for each reason has it, and its pod stays Pending.

    The feasible one (its pod asks for more CPU than a node has) is allocated once its pod is
    replaced by one asking for little.
    """
    partition_held = held(cluster, "held-partition")
    built = {
        "r-class": ("class_not_found", world.claim("r-class", "diag-nope")),
        "r-selector": ("selector_error", world.claim("r-selector", "diag-gpu", f"{TYPE}.type > 1")),
        "r-none": (
            "no_matching_device",
            world.claim("r-none", "diag-gpu", f'{TYPE}.uuid == "none"'),
        ),
        "r-pool": (
            "pool_unusable",
            world.claim("r-pool", "diag-gpu", f'{TYPE}.uuid == "diag-b-incomplete/gpu-0"'),
        ),
        "r-taint": ("tainted", world.claim("r-taint", "diag-spare")),
        "r-use": (
            "in_use",
            world.claim("r-use", "diag-mig", f'{TYPE}.uuid == "diag-a-mig/{partition_held}"'),
        ),
        "r-many": ("insufficient", world.claim("r-many", "diag-gpu", count=4)),
        "r-big": ("exceeds_capacity", world.claim("r-big", "diag-gpu", count=5)),
        "r-cpu": ("feasible", world.claim("r-cpu", "diag-gpu")),
    }
    for name, (_, made) in built.items():
        run(cluster, name, made, cpu="100" if name == "r-cpu" else "100m")
    try:
        for name in built:
            condition = wait_until(
                partial(world.unschedulable, cluster, name), world.SCHEDULED, f"{name} left pending"
            )
            assert condition["reason"] in ("Unschedulable", "SchedulerError"), condition
        body = world.scrape_once(cluster, tmp_path / "pending")
        assert {n: r for n, r in reasons(body).items() if n in built} == {
            name: reason for name, (reason, _) in built.items()
        }
        matching = {
            (row["resourceclaim_name"], row["state"]): value
            for row, value in world.values(body, "kube_resourceclaim_request_matching_devices")
        }
        assert matching[("r-use", "allocated")] == 1
        assert matching[("r-pool", "unusable")] == 1
        assert matching[("r-taint", "tainted")] == 1
        for name, (_, _) in built.items():
            assert "allocation" not in cluster.kube.get(f"{world.CLAIMS}/{name}").get("status", {})
        cluster.delete_pod(world.NAMESPACE, "r-cpu")
        cluster.kube.create(
            world.PODS, world.pod("r-cpu", {"resourceClaimName": "r-cpu"}, cpu="100m")
        )
        wait_until(
            partial(world.bound, cluster, "r-cpu"),
            world.SCHEDULED,
            "the feasible claim's new pod",
        )
        assert cluster.kube.get(f"{world.CLAIMS}/r-cpu")["status"]["allocation"]
    finally:
        world.remove(cluster, list(built))


def placed_one_after_another(cluster: Simulated, node: str, deviceclass: str) -> int:
    """How many one-device pods pinned to *node* the scheduler places before one stays Pending."""

    def start(name: str) -> None:
        run(cluster, name, world.claim(name, deviceclass), node=node)

    return simworld.placed_one_after_another(cluster, f"fit-{node}-{deviceclass}", start)


def test_headroom_is_what_the_scheduler_places(cluster: Simulated, tmp_path: Path) -> None:
    """Whole GPUs, MIG partitions with one in use, a shared NIC, an incomplete pool."""
    body = world.scrape_once(cluster, tmp_path / "headroom")
    headroom: dict[tuple[str, str], float] = {}
    for row, value in world.values(body, "kube_resourcepool_allocatable_devices"):
        key = (row["node_name"], row["deviceclass_name"])
        headroom[key] = headroom.get(key, 0.0) + value
    cases = [("diag-a", "diag-gpu"), ("diag-a", "diag-mig"), ("diag-b", "diag-nic")]
    cases.append(("diag-b", "diag-gpu"))
    # First fit gave the held partition's claim the 2g partition (memory slices 0 and 1): two
    # 1g partitions are left, the whole GPU is blocked.
    assert held(cluster, "held-partition") == "mig-2g-0"
    expected = {("diag-a", "diag-gpu"): 3, ("diag-a", "diag-mig"): 2, ("diag-b", "diag-nic"): 7}
    expected[("diag-b", "diag-gpu")] = 0
    assert {case: headroom[case] for case in cases} == expected
    for node, deviceclass in cases:
        placed = placed_one_after_another(cluster, node, deviceclass)
        assert placed == headroom[(node, deviceclass)], (node, deviceclass)


def test_orphaned_device_and_eviction_condition(cluster: Simulated, tmp_path: Path) -> None:
    """A device republished away under its claim is orphaned.

    A NoExecute DeviceTaintRule's condition, as the eviction controller writes it, and its
    taint's age are shown.
    """
    lost = cluster.kube.get(f"{SLICES_PATH}/diag-b-lost")
    lost["spec"]["devices"] = [world.device("diag-b-lost", "y", "lost")]
    cluster.kube.put(f"{SLICES_PATH}/diag-b-lost", lost)
    link_down = ("example.com/link-down", "NoExecute")
    rule = world.taint_rule("evict-share", *link_down, pool="diag-b-nic", device="nic")
    cluster.kube.create(f"{world.RESOURCE}/devicetaintrules", rule)
    started = time.time()

    def conditioned() -> dict[str, Any] | None:
        got = cluster.kube.get(f"{world.RESOURCE}/devicetaintrules/evict-share")
        return got if got.get("status", {}).get("conditions") else None

    written = wait_until(conditioned, world.SCHEDULED, "the eviction controller's condition")
    body = world.scrape_once(cluster, tmp_path / "lost")
    assert [
        (row["resourceclaim_name"], row["pool"], row["device_name"], row["reason"])
        for row in world.samples(body, "kube_resourceclaim_allocation_orphaned")
    ] == [("held-lost", "diag-b-lost", "x", "device_gone")]
    conditions = {
        (row["condition"], row["status"])
        for row in world.samples(body, "kube_devicetaintrule_status_condition")
        if row["devicetaintrule"] == "evict-share"
    }
    assert conditions == {(c["type"], c["status"].lower()) for c in written["status"]["conditions"]}
    assert {c for c, _ in conditions} == {"EvictionInProgress"}
    added = [
        value
        for row, value in world.values(
            body, "kube_resourceslice_device_taint_added_timestamp_seconds"
        )
        if row["key"] == "example.com/link-down" and row["device_name"] == "nic"
    ]
    assert len(added) == 1 and started - 60 <= added[0] <= time.time() + 1, added


def pinned(name: str, deviceclass: str, pool: str, device_name: str, **exactly: Any) -> Any:
    """A claim for one device, named by its uuid."""
    return world.claim(name, deviceclass, f'{TYPE}.uuid == "{pool}/{device_name}"', **exactly)


def reason_of(cluster: Simulated, directory: Path, name: str) -> dict[str, str]:
    """The exporter's reasons for claim *name*'s requests, once its pod is left Pending."""
    wait_until(partial(world.unschedulable, cluster, name), world.SCHEDULED, f"{name} left pending")
    body = world.scrape_once(cluster, directory)
    return {
        row["request"]: row["reason"]
        for row in world.samples(body, "kube_resourceclaim_pending_reason")
        if row["resourceclaim_name"] == name
    }


def test_exceeds_capacity_does_not_follow_other_claims(cluster: Simulated, tmp_path: Path) -> None:
    """Five GPUs asked where a node has at most four (three, and a whole GPU in MIG mode).

    The reason stays exceeds_capacity while claims take the free GPUs one by one and a NoSchedule
    DeviceTaintRule takes the last free one out of service; the scheduler leaves it Pending.
    """
    run(cluster, "x-big", world.claim("x-big", "diag-gpu", count=5))
    taken: list[str] = []
    rule_path = f"{world.RESOURCE}/devicetaintrules/x-last"
    try:
        assert reason_of(cluster, tmp_path / "free", "x-big") == {"dev": "exceeds_capacity"}
        for index in (0, 1):
            name = f"x-take-{index}"
            taken.append(name)
            run(cluster, name, pinned(name, "diag-gpu", "diag-a", f"gpu-{index}"), node="diag-a")
            wait_until(partial(world.bound, cluster, name), world.SCHEDULED, f"{name} scheduled")
        rule = world.taint_rule(
            "x-last", "example.com/x-last", "NoSchedule", pool="diag-a", device="gpu-2"
        )
        cluster.kube.create(f"{world.RESOURCE}/devicetaintrules", rule)
        tainted = world.samples(
            world.scrape_once(cluster, tmp_path / "tainted-state"),
            "kube_resourceslice_device_state",
        )
        assert {(r["pool"], r["device_name"], r["state"]) for r in tainted} >= {
            ("diag-a", "gpu-2", "tainted")
        }
        assert reason_of(cluster, tmp_path / "tainted", "x-big") == {"dev": "exceeds_capacity"}
        cluster.kube.delete(rule_path)
        taken.append("x-take-2")
        run(cluster, "x-take-2", pinned("x-take-2", "diag-gpu", "diag-a", "gpu-2"), node="diag-a")
        wait_until(partial(world.bound, cluster, "x-take-2"), world.SCHEDULED, "x-take-2 scheduled")
        assert reason_of(cluster, tmp_path / "taken", "x-big") == {"dev": "exceeds_capacity"}
        assert not world.bound(cluster, "x-big")
        assert "allocation" not in cluster.kube.get(f"{world.CLAIMS}/x-big").get("status", {})
    finally:
        try:
            cluster.kube.delete(rule_path)
        except APIError as error:
            if error.code != 404:
                raise
        world.remove(cluster, ["x-big", *taken])


def test_not_together(cluster: Simulated, tmp_path: Path) -> None:
    """A GPU on one node and a NIC share on the other: each fits alone, not on one node."""
    gpu = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "diag-gpu",
            "selectors": [{"cel": {"expression": f'{TYPE}.uuid == "diag-a/gpu-0"'}}],
        },
    }
    # The NIC may carry the NoExecute rule of the test before: tolerated, it is free alone.
    everything = [{"operator": "Exists"}]
    nic = {"name": "nic", "exactly": {"deviceClassName": "diag-nic", "tolerations": everything}}
    made = world.claim("x-apart", "diag-gpu")
    made["spec"]["devices"]["requests"] = [gpu, nic]
    run(cluster, "x-apart", made)
    try:
        assert reason_of(cluster, tmp_path / "apart", "x-apart") == {
            "gpu": "not_together",
            "nic": "not_together",
        }
        assert "allocation" not in cluster.kube.get(f"{world.CLAIMS}/x-apart").get("status", {})
    finally:
        world.remove(cluster, ["x-apart"])


def profiled(pool: str, *names: str) -> list[dict[str, Any]]:
    """A whole GPU (no ``profile``) and two partitions (``profile`` 1g), in the order named."""
    made = []
    for name in names:
        body = world.device(pool, name, "part" if name != "whole" else "cwhole")
        slices = ("0", "1") if name == "whole" else (name[-1],)
        needs = world.counters(**{f"memory_slice_{index}": "1" for index in slices})
        body["consumesCounters"] = [{"counterSet": "gpu", "counters": needs}]
        if name != "whole":
            body["attributes"]["profile"] = {"string": "1g"}
        made.append(body)
    return made


PROFILE = (
    f'{TYPE}.uuid.startsWith("diag-c/") || {TYPE}.uuid.startsWith("diag-d/") '
    f'? {TYPE}.profile == "1g" : false'
)
"""Partitions by their profile: an error on the whole GPU, which has none."""


def test_selector_error_ends_headroom(cluster: Simulated, tmp_path: Path) -> None:
    """A class selecting on ``profile``: the allocator stops at the whole GPU, which has none.

    Where the whole GPU comes first 0 fit, and the scheduler refuses a probe with a CEL runtime
    error; where the partitions come first two fit, and the scheduler places two.
    """
    made = []
    two = world.counters(memory_slice_0="1", memory_slice_1="1")
    for node, order in (("diag-c", ("whole", "p-0", "p-1")), ("diag-d", ("p-0", "p-1", "whole"))):
        cluster.add_node(node)
        made += [
            world.pool_slice(
                f"{node}-counters",
                node,
                node,
                2,
                sharedCounters=[{"name": "gpu", "counters": two}],
            ),
            world.pool_slice(f"{node}-devices", node, node, 2, devices=profiled(node, *order)),
        ]
    selecting = world.device_class("diag-profile", "part")
    selecting["spec"]["selectors"] = [{"cel": {"expression": PROFILE}}]
    cluster.kube.create(f"{world.RESOURCE}/deviceclasses", selecting)
    for body in made:
        cluster.kube.create(SLICES_PATH, body)
    try:
        written = world.scrape_once(cluster, tmp_path / "headroom")
        headroom = {
            row["node_name"]: value
            for row, value in world.values(written, "kube_resourcepool_allocatable_devices")
            if row["deviceclass_name"] == "diag-profile"
        }
        assert headroom == {"diag-c": 0, "diag-d": 2}
        run(cluster, "x-probe", world.claim("x-probe", "diag-profile"), node="diag-c")
        try:
            condition = wait_until(
                partial(world.unschedulable, cluster, "x-probe"),
                world.SCHEDULED,
                "the probe refused",
            )
            assert condition["reason"] == "SchedulerError", condition
            assert "CEL runtime error" in condition["message"], condition
            assert reason_of(cluster, tmp_path / "probe", "x-probe") == {"dev": "selector_error"}
        finally:
            world.remove(cluster, ["x-probe"])
        assert placed_one_after_another(cluster, "diag-d", "diag-profile") == 2
    finally:
        for body in made:
            cluster.kube.delete(f"{SLICES_PATH}/{body['metadata']['name']}")
        cluster.kube.delete(f"{world.RESOURCE}/deviceclasses/diag-profile")


def test_admin_access_needs_the_counters(cluster: Simulated, tmp_path: Path) -> None:
    """An adminAccess claim for a partition overlapping the one held: in_use, left Pending.

    One for a partition whose counters are free is allocated, although admin access.
    """
    namespace = cluster.kube.get(f"/api/v1/namespaces/{world.NAMESPACE}")
    namespace["metadata"].setdefault("labels", {})["resource.kubernetes.io/admin-access"] = "true"
    cluster.kube.put(f"/api/v1/namespaces/{world.NAMESPACE}", namespace)
    assert held(cluster, "held-partition") == "mig-2g-0"  # memory slices 0 and 1
    overlapping = pinned("x-admin", "diag-mig", "diag-a-mig", "mig-1g-0", adminAccess=True)
    free = pinned("x-admin-free", "diag-mig", "diag-a-mig", "mig-1g-3", adminAccess=True)
    run(cluster, "x-admin", overlapping)
    run(cluster, "x-admin-free", free)
    try:
        wait_until(
            partial(world.bound, cluster, "x-admin-free"),
            world.SCHEDULED,
            "the free admin claim",
        )
        assert reason_of(cluster, tmp_path / "admin", "x-admin") == {"dev": "in_use"}
        assert "allocation" not in cluster.kube.get(f"{world.CLAIMS}/x-admin").get("status", {})
    finally:
        world.remove(cluster, ["x-admin", "x-admin-free"])
