"""The pool families: generation, completeness, state, counters, a utilisation that counts once."""

from __future__ import annotations

from typing import Any

import pytest

from kdraexp.store.collection import Collection
from tests.collect import collect, labels, values
from tests.objects import NVIDIA, classy, counters, device, gpu, new_claim, pool_slice, result
from tests.test_resourceslice_families import dynamic_mig


def pool(collection: Collection, family: str, *keys: str) -> dict[tuple[str, ...], float]:
    return values(collection, f"kube_resourcepool_{family}", "pool", *keys)


def test_generation_slices_and_completeness() -> None:
    """expected and published of the current generation, stale ones, complete when all are in."""
    slices = [
        pool_slice("old", [gpu("a")], pool="p", generation=1),
        pool_slice("new-1", [gpu("a")], pool="p", generation=2, count=2),
        pool_slice("new-2", [gpu("b")], pool="p", generation=2, count=2),
        pool_slice("only", [gpu("a")], pool="q", count=3),
    ]
    written = collect(slices=slices)
    assert pool(written, "generation") == {("p",): 2, ("q",): 1}
    assert pool(written, "slices", "state") == {
        ("p", "expected"): 2,
        ("p", "published"): 2,
        ("p", "stale"): 1,
        ("q", "expected"): 3,
        ("q", "published"): 1,
        ("q", "stale"): 0,
    }
    assert pool(written, "complete") == {("p",): 1, ("q",): 0}


def test_plain_pool_utilisation() -> None:
    """Without counters: allocated devices over devices (adminAccess results do not count)."""
    claims = [
        new_claim("one", [result("a", "p")]),
        new_claim("watch", [result("b", "p", adminAccess=True)]),
    ]
    written = collect(
        slices=[pool_slice("s", [gpu("a"), gpu("b"), gpu("c"), gpu("d")], pool="p")], claims=claims
    )
    assert pool(written, "utilization_ratio") == {("p",): 0.25}


def test_partitioned_gpu_counts_once() -> None:
    """A GPU and its partitions are one unit: its most used counter, never the device count."""
    slices, claims = dynamic_mig("mig-a")
    written = collect(slices=slices, claims=claims)
    counter = pool(written, "shared_quantity", "counter", "state")
    assert counter[("node", "memory-slice-0", "consumed")] == 1
    assert counter[("node", "memory-slice-1", "consumed")] == 0
    assert counter[("node", "multiprocessors", "total")] == 98
    assert counter[("node", "multiprocessors", "consumed")] == 14
    assert pool(written, "utilization_ratio") == {("node",): 0.5}, (
        "memory-slice-0 and -1 are one placement group, half used: the busiest unit"
    )
    none_used = collect(slices=slices)
    assert pool(none_used, "utilization_ratio") == {("node",): 0.0}


def test_counter_units_and_plain_devices_mix() -> None:
    """Counter sets and counterless devices are averaged as units."""
    slices, _ = dynamic_mig()
    slices.append(pool_slice("plain", [gpu("solo")], pool="node", count=2))
    slices[0]["spec"]["pool"]["resourceSliceCount"] = 3
    slices[1]["spec"]["pool"]["resourceSliceCount"] = 3
    slices[2]["spec"]["pool"]["resourceSliceCount"] = 3
    written = collect(slices=slices, claims=[new_claim("c", [result("solo", "node")])])
    assert pool(written, "utilization_ratio") == {("node",): 0.5}


def states(collection: Collection) -> dict[str, str]:
    """Each device's one state."""
    return {
        row["device_name"]: row["state"]
        for row in labels(collection, "kube_resourceslice_device_state")
    }


def test_pool_state_as_the_allocator_judges_it() -> None:
    """incomplete first (not validated), then invalid, else usable; devices there are unusable."""
    slices = [
        pool_slice("ok", [gpu("a")], pool="ok"),
        pool_slice("half", [gpu("b")], pool="half", count=2),
        pool_slice("twice-1", [gpu("c")], pool="twice", count=2),
        pool_slice("twice-2", [gpu("c")], pool="twice", count=2),
        pool_slice(
            "unknown",
            [gpu("d", consumesCounters=[{"counterSet": "nope", "counters": counters(x="1")}])],
            pool="unknown",
        ),
        pool_slice(
            "sets",
            pool="sets",
            count=2,
            sharedCounters=[
                {"name": "s", "counters": counters(x="1")},
                {"name": "s", "counters": counters(x="1")},
            ],
        ),
        pool_slice("sets-devices", [gpu("e")], pool="sets", count=2),
    ]
    claims = [new_claim("held", [result("b", "half")])]
    written = collect(slices=slices, claims=claims)
    assert pool(written, "state", "state") == {
        ("ok", "usable"): 1,
        ("half", "incomplete"): 1,
        ("twice", "invalid"): 1,
        ("unknown", "invalid"): 1,
        ("sets", "invalid"): 1,
    }
    assert states(written) == {
        "a": "available",
        "b": "allocated",  # allocated stays allocated, whatever the pool
        "c": "unusable",
        "d": "unusable",
        "e": "unusable",
    }


def test_h200_with_one_small_partition_is_not_full() -> None:
    """Eight memory slices are one placement group: one 1g partition uses an eighth of it."""
    every = counters(multiprocessors="132", memory="141Gi")
    every.update(counters(**{f"memory_slice_{i}": "1" for i in range(8)}))
    small = counters(multiprocessors="16", memory="18Gi", memory_slice_3="1")
    slices = [
        pool_slice(
            "counters", pool="h200", count=2, sharedCounters=[{"name": "g", "counters": every}]
        ),
        pool_slice(
            "devices",
            [
                gpu("whole", consumesCounters=[{"counterSet": "g", "counters": every}]),
                gpu("1g", "mig", consumesCounters=[{"counterSet": "g", "counters": small}]),
            ],
            pool="h200",
            count=2,
        ),
    ]
    written = collect(slices=slices, claims=[new_claim("c", [result("1g", "h200")])])
    (ratio,) = pool(written, "utilization_ratio").values()
    assert abs(ratio - 18 / 141) < 1e-9  # memory is the busiest: 18Gi of 141Gi
    assert states(written) == {"whole": "blocked", "1g": "allocated"}


def shared_nic(name: str = "nic") -> dict[str, Any]:
    return device(name, {"bandwidth": "800G"}, {}, allowMultipleAllocations=True)


def test_shareable_device_capacity_left_and_use() -> None:
    """A device allowing multiple allocations: capacity left, and its most used capacity."""
    claims = [
        new_claim("a", [result("nic", consumedCapacity={"bandwidth": "200G"})]),
        new_claim("b", [result("nic", consumedCapacity={"bandwidth": "100G"})]),
        new_claim(
            "admin", [result("nic", adminAccess=True, consumedCapacity={"bandwidth": "400G"})]
        ),
    ]
    written = collect(slices=[pool_slice("s", [shared_nic()])], claims=claims)
    left = values(
        written, "kube_resourceslice_device_capacity_available", "device_name", "capacity"
    )
    assert left == {("nic", "bandwidth"): 500e9}
    assert pool(written, "utilization_ratio") == {("pool",): 0.375}
    assert states(written) == {"nic": "allocated"}
    assert (
        values(
            collect(slices=[pool_slice("s", [gpu("g")])]),
            "kube_resourceslice_device_capacity_available",
        )
        == {}
    )


# --- Idle cost: each unit of a pool priced once ---------------------------------------------------

H200 = "NVIDIA H200 141GB HBM3e"
PRICED = [
    classy(
        "h200",
        f'device.attributes["gpu.nvidia.com"].type == "gpu" && '
        f'device.attributes["gpu.nvidia.com"].productName == "{H200}"',
        "5.00",
    ),
    classy("any-gpu", 'device.attributes["gpu.nvidia.com"].type == "gpu"', "3.50"),
    classy("mig-1g", 'device.attributes["gpu.nvidia.com"].type == "mig"', "0.55"),
    classy("broken-price", 'device.attributes["gpu.nvidia.com"].type == "gpu"', "9,00"),
]
"""Overlapping classes: per model, generic, MIG partitions, and a cost that is not one."""


def h200(pool: str, memory_slices: int = 8) -> list[dict[str, Any]]:
    """An H200 in dynamic MIG mode: the whole GPU and seven 1g partitions, one memory slice each."""
    every = counters(multiprocessors="132", memory="141Gi")
    every.update(counters(**{f"memory_slice_{i}": "1" for i in range(memory_slices)}))
    partitions = [
        gpu(
            f"1g-{i}",
            "mig",
            H200,
            consumesCounters=[
                {
                    "counterSet": "h200",
                    "counters": counters(
                        multiprocessors="16", memory="16Gi", **{f"memory_slice_{i}": "1"}
                    ),
                }
            ],
        )
        for i in range(7)
    ]
    whole = gpu("whole", "gpu", H200, consumesCounters=[{"counterSet": "h200", "counters": every}])
    return [
        pool_slice(
            "a-counters", pool=pool, count=2, sharedCounters=[{"name": "h200", "counters": every}]
        ),
        pool_slice("b-devices", [whole, *partitions], pool=pool, count=2),
    ]


def idle(collection: Collection) -> dict[tuple[str, ...], float]:
    return pool(collection, "idle_hourly_cost", "node_name")


def test_two_idle_h200s_cost_ten() -> None:
    """One H200 partitionable into seven 1g partitions, one whole: 5.00 each, not 20.85.

    (20.85: each class's cost summed over the devices it selects, as the dashboard did.)  The
    partitionable GPU is one unit priced at the whole GPU's list price (5.00: the partitions'
    0.55 over an eighth of the memory slices is 4.40); the plain one is priced by the highest of
    its classes (h200 5.00 over any-gpu 3.50; a malformed cost counts for nothing).
    """
    slices = [*h200("mig-node"), pool_slice("plain", [gpu("g", product=H200)], pool="plain-node")]
    written = collect(slices=slices, classes=PRICED)
    assert idle(written) == {("mig-node", "mig-node"): 5.0, ("plain-node", "plain-node"): 5.0}
    assert sum(idle(written).values()) == 10.0


def test_a_used_partition_leaves_the_rest_of_the_gpu_idle() -> None:
    """One 1g partition in use: the GPU's busiest placement group is an eighth, 7/8 idle."""
    claims = [new_claim("one", [result("1g-3", "mig-node")])]
    written = collect(slices=h200("mig-node"), classes=PRICED, claims=claims)
    assert states(written)["whole"] == "blocked", "blocked, and idle with the rest of the GPU"
    assert idle(written) == {("mig-node", "mig-node"): 5.0 * 7 / 8}
    everything = [new_claim(f"p{i}", [result(f"1g-{i}", "mig-node")]) for i in range(7)]
    written = collect(slices=h200("mig-node"), classes=PRICED, claims=everything)
    assert idle(written) == {("mig-node", "mig-node"): 5.0 * 1 / 8}, "one memory slice unused"
    whole = collect(
        slices=h200("mig-node"),
        classes=PRICED,
        claims=[new_claim("w", [result("whole", "mig-node")])],
    )
    assert idle(whole) == {("mig-node", "mig-node"): 0.0}, "a used pool is written, at 0"


def test_a_gpu_priced_by_its_partitions_alone() -> None:
    """No class prices the whole GPU: its price is a partition's over its share, 0.55 x 7."""
    mig_only = [PRICED[2]]
    slices = h200("mig-node", memory_slices=7)
    written = collect(slices=slices, classes=mig_only)
    (cost,) = idle(written).values()
    assert cost == pytest.approx(0.55 * 7)
    used = collect(
        slices=slices, classes=mig_only, claims=[new_claim("c", [result("1g-0", "mig-node")])]
    )
    (cost,) = idle(used).values()
    assert cost == pytest.approx(0.55 * 6)
    dearer = classy("mig-1g", 'device.attributes["gpu.nvidia.com"].type == "mig"', "0.80")
    (cost,) = idle(collect(slices=slices, classes=[PRICED[0], dearer])).values()
    assert cost == pytest.approx(0.80 * 7), "the largest of the prices the devices imply"


def test_shareable_device_idles_by_its_most_used_capacity() -> None:
    """An 800G NIC priced 2.00 carrying 300G of shares: 5/8 of it idle, 1.25."""
    claims = [
        new_claim("a", [result("nic", consumedCapacity={"bandwidth": "200G"})]),
        new_claim("b", [result("nic", consumedCapacity={"bandwidth": "100G"})]),
        new_claim(
            "admin", [result("nic", adminAccess=True, consumedCapacity={"bandwidth": "400G"})]
        ),
    ]
    written = collect(
        slices=[pool_slice("s", [shared_nic()])],
        claims=claims,
        classes=[classy("nic", cost="2.00")],
    )
    assert idle(written) == {("pool", "pool"): 1.25}


def test_tainted_and_blocked_devices_are_idle() -> None:
    """A tainted device, by its own taint or a rule, is paid for and unused: idle in full."""
    devices = [
        gpu("own", taints=[{"key": "burn-in", "effect": "NoSchedule"}]),
        gpu("ruled"),
        gpu("used"),
    ]
    rules = [
        {
            "metadata": {"name": "drain", "resourceVersion": "1"},
            "spec": {
                "deviceSelector": {"driver": NVIDIA, "pool": "pool", "device": "ruled"},
                "taint": {"key": "maintenance", "effect": "NoExecute"},
            },
        }
    ]
    written = collect(
        slices=[pool_slice("s", devices)],
        classes=[classy("gpu", cost="1.50")],
        claims=[new_claim("c", [result("used")])],
        rules=rules,
    )
    assert states(written) == {"own": "tainted", "ruled": "tainted", "used": "allocated"}
    assert idle(written) == {("pool", "pool"): 3.0}


def test_unusable_unpriced_and_gone_pools_have_no_row() -> None:
    """Incomplete and invalid pools, pools no valid cost prices, pools left without devices."""
    slices = [
        pool_slice("half", [gpu("a")], pool="half", count=2),
        pool_slice("twice-1", [gpu("b")], pool="twice", count=2),
        pool_slice("twice-2", [gpu("b")], pool="twice", count=2),
        pool_slice("nic", [shared_nic()], pool="unpriced"),
        pool_slice(
            "gone", pool="gone", sharedCounters=[{"name": "g", "counters": counters(x="1")}]
        ),
        pool_slice("ok", [gpu("c")], pool="ok"),
    ]
    classes = [classy("gpu", 'device.attributes["gpu.nvidia.com"].type == "gpu"', "2.00")]
    written = collect(slices=slices, classes=classes)
    assert idle(written) == {("ok", "ok"): 2.0}
    assert pool(written, "state", "state")[("half", "incomplete")] == 1
    assert pool(written, "state", "state")[("twice", "invalid")] == 1
    assert ("gone",) not in pool(written, "utilization_ratio"), "no devices: no utilisation"


def test_over_committed_counters_idle_nothing_and_take_nothing_from_the_rest() -> None:
    """Two partitions the allocator gave the same memory slice: that GPU idles 0, not -5."""
    every = counters(memory_slice_0="1")
    overlapping = [
        gpu(name, "mig", consumesCounters=[{"counterSet": "s", "counters": every}])
        for name in ("m0", "m1")
    ]
    slices = [
        pool_slice("a", pool="p", count=2, sharedCounters=[{"name": "s", "counters": every}]),
        pool_slice("b", [*overlapping, gpu("spare")], pool="p", count=2),
    ]
    claims = [new_claim("x", [result("m0", "p")]), new_claim("y", [result("m1", "p")])]
    written = collect(slices=slices, claims=claims, classes=[classy("any", cost="5.00")])
    assert pool(written, "utilization_ratio") == {("p",): 1.0}, "(2 + 0) / 2 units"
    assert idle(written) == {("p", "p"): 5.0}, "the spare alone"


def test_idle_cost_per_node_of_a_pool() -> None:
    """Per-device node selection: each node's devices priced on their own row."""
    spread = pool_slice(
        "s",
        [gpu("a", nodeName="node-a"), gpu("b", nodeName="node-b"), gpu("c", nodeName="node-b")],
        pool="spread",
        perDeviceNodeSelection=True,
    )
    del spread["spec"]["nodeName"]
    written = collect(
        slices=[spread],
        classes=[classy("gpu", cost="1.00")],
        claims=[new_claim("c", [result("c", "spread")])],
    )
    assert idle(written) == {("spread", "node-a"): 1.0, ("spread", "node-b"): 1.0}


def test_a_share_too_small_to_price_by_is_no_price() -> None:
    """A vanishing share at a huge price prices its GPU past float64: no idle cost is written.

    A problem says so.  Used whole, the GPU idles nothing whatever its price: 0, not NaN (Inf
    times 0).  (It used to price nothing, so the idle GPU read 2.00, its whole's price alone.)
    """
    shared = counters(memory="1E")
    slices = [
        pool_slice("a", pool="p", count=2, sharedCounters=[{"name": "s", "counters": shared}]),
        pool_slice(
            "b",
            [
                gpu(
                    "tiny",
                    "mig",
                    consumesCounters=[{"counterSet": "s", "counters": counters(memory="1n")}],
                ),
                gpu("whole", consumesCounters=[{"counterSet": "s", "counters": shared}]),
            ],
            pool="p",
            count=2,
        ),
    ]
    classes = [
        classy("mig", 'device.attributes["gpu.nvidia.com"].type == "mig"', "9" * 300),
        classy("gpu", 'device.attributes["gpu.nvidia.com"].type == "gpu"', "2.00"),
    ]
    used = [new_claim("c", [result("whole", "p")])]
    unused = collect(slices=slices, classes=classes)
    assert idle(unused) == {}
    assert [(p.resource, p.field) for p in unused.problems] == [("deviceclasses", "hourly-cost")]
    assert idle(collect(slices=slices, classes=classes, claims=used)) == {("p", "p"): 0.0}
