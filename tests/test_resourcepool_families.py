"""The pool families: generation, completeness, state, counters, a utilisation that counts once."""

from __future__ import annotations

from typing import Any

from kdraexp.store.collection import Collection
from tests.collect import collect, labels, values
from tests.objects import counters, device, gpu, new_claim, pool_slice, result
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
