"""A ResourceSlice without devices (drivers publish one while a GPU initialises) is a valid slice.

It counts towards its pool's ``resourceSliceCount`` as the allocator counts it, and changes no
other row: every family's output with it is the output without it, but for the slice's own info
and its pool's slice counts.  No value is NaN.
"""

from __future__ import annotations

import math
from typing import Any

from twisted.internet.task import Clock

from kdraexp.families import FAMILIES
from tests.collect import collect, samples
from tests.fakeapi import FakeKubeAPI
from tests.objects import attributes, classy, counters, device, gpu, new_claim, pool_slice, result
from tests.test_watch import Watched

MIG = counters(memory_slice_0="1", memory_slice_1="1")
PER_SLICE = {"kube_resourceslice_info", "kube_resourcepool_slices"}
"""The families that count slices: the only ones an empty slice adds to."""


def part(name: str, *memory_slices: int) -> dict[str, Any]:
    needs = counters(**{f"memory_slice_{i}": "1" for i in memory_slices})
    return gpu(name, "mig", consumesCounters=[{"counterSet": "g", "counters": needs}])


def empty(name: str, pool: str, count: int, listed: bool = True) -> dict[str, Any]:
    """A slice of *pool* with ``devices: []`` (*listed*) or no devices field at all."""
    return pool_slice(name, [] if listed else None, pool=pool, count=count)


def cluster(with_empty: bool) -> dict[str, Any]:
    """Every kind of pool, each with an empty slice beside its others when *with_empty*."""
    extra = 1 if with_empty else 0
    slices = [
        pool_slice("plain", [gpu("a"), gpu("b")], pool="plain", count=1 + extra),
        pool_slice(
            "mig-counters",
            pool="mig",
            count=2 + extra,
            sharedCounters=[{"name": "g", "counters": MIG}],
        ),
        pool_slice(
            "mig-devices",
            [
                gpu("whole", consumesCounters=[{"counterSet": "g", "counters": MIG}]),
                part("mig-0", 0),
                part("mig-1", 1),
            ],
            pool="mig",
            count=2 + extra,
        ),
        pool_slice(
            "nic",
            [
                device(
                    "nic",
                    {"bandwidth": "800G"},
                    attributes(type="nic"),
                    allowMultipleAllocations=True,
                )
            ],
            pool="nic",
            count=1 + extra,
        ),
        pool_slice("half", [gpu("c")], pool="half", count=2 + extra),
    ]
    if with_empty:
        slices += [
            empty("plain-empty", "plain", 2),
            empty("mig-empty", "mig", 3, listed=False),
            empty("nic-empty", "nic", 2),
            empty("half-empty", "half", 3),
        ]
    return {
        "slices": slices,
        "claims": [
            new_claim("one", [result("a", "plain")]),
            new_claim("part", [result("mig-0", "mig")]),
            new_claim("share", [result("nic", "nic", consumedCapacity={"bandwidth": "200G"})]),
            new_claim("waiting", None),
        ],
        "classes": [
            classy("gpu.nvidia.com", 'device.attributes["gpu.nvidia.com"].type == "gpu"', "4.00"),
            classy("mig", 'device.attributes["gpu.nvidia.com"].type == "mig"', "1.00"),
            classy("nic", 'device.attributes["gpu.nvidia.com"].type == "nic"', "2.00"),
        ],
    }


def written(collected: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, set[Any]]:
    """Each family's samples as a set of (labels, value)."""
    return {
        name: {(tuple(sorted(labels.items())), value) for labels, value in rows}
        for name, rows in collected.items()
    }


def assert_no_nan(collected: dict[str, list[tuple[dict[str, str], float]]]) -> None:
    for name, rows in collected.items():
        assert not any(math.isnan(value) for _, value in rows), name


def test_empty_slices_beside_others_change_nothing_but_the_slice_counts() -> None:
    """Beside slices with devices or counters: every other family as without them."""
    without = samples(collect(**cluster(with_empty=False)))
    with_empty = samples(collect(**cluster(with_empty=True)))
    assert_no_nan(with_empty)
    before, after = written(without), written(with_empty)
    assert {name for name in after if name in PER_SLICE} == PER_SLICE
    for family in FAMILIES:
        if family.name not in PER_SLICE:
            assert after.get(family.name) == before.get(family.name), family.name
    assert "kube_resourcepool_idle_hourly_cost" in after
    assert "kube_resourcepool_utilization_ratio" in after
    assert "kube_resourcepool_allocatable_devices" in after
    assert "kube_resourceclaim_pending_reason" in after
    slices = {labels["resourceslice_name"] for labels, _ in with_empty["kube_resourceslice_info"]}
    assert {"plain-empty", "mig-empty", "nic-empty", "half-empty"} <= slices
    published = {
        labels["pool"]: value
        for labels, value in with_empty["kube_resourcepool_slices"]
        if labels["state"] == "published"
    }
    assert published == {"plain": 2, "mig": 3, "nic": 2, "half": 2}


def test_a_pool_of_empty_slices_alone() -> None:
    """A pool with no devices is a usable, complete pool of slices; nothing else is written."""
    objects = cluster(with_empty=False)
    objects["slices"] += [empty("lone-0", "lone", 2), empty("lone-1", "lone", 2, listed=False)]
    with_lone = samples(collect(**objects))
    assert_no_nan(with_lone)
    lone = {
        name: sorted(
            (labels.get("state", ""), value)
            for labels, value in rows
            if labels.get("pool") == "lone"
        )
        for name, rows in with_lone.items()
        if any(labels.get("pool") == "lone" for labels, _ in rows)
    }
    assert lone == {
        "kube_resourceslice_info": [("", 1.0), ("", 1.0)],
        "kube_resourcepool_generation": [("", 1.0)],
        "kube_resourcepool_slices": [("expected", 2.0), ("published", 2.0), ("stale", 0.0)],
        "kube_resourcepool_complete": [("", 1.0)],
        "kube_resourcepool_state": [("usable", 1.0)],
    }


def test_empty_slices_in_watch_mode(fake: FakeKubeAPI, clock: Clock) -> None:
    """Followed event by event, an empty slice added beside others changes only slice counts."""
    objects = cluster(with_empty=False)
    for plural, key in (("deviceclasses", "classes"), ("resourceslices", "slices")):
        for obj in objects[key]:
            fake.add(plural, obj)
    for obj in objects["claims"]:
        fake.add("resourceclaims", obj)
    watched = Watched(fake, clock)
    watched.gatherer.start()
    watched.settle()
    listed = watched.text()
    grown = cluster(with_empty=True)
    for obj in grown["slices"]:
        name = obj["metadata"]["name"]
        kind = "ADDED" if name.endswith("-empty") else "MODIFIED"
        obj["metadata"]["resourceVersion"] = "2"
        fake.change("resourceslices", kind, obj)
    watched.settle()
    followed = watched.text()
    assert "NaN" not in followed
    changed = {line for line in followed.splitlines() if not line.startswith("#")}
    kept = {line for line in listed.splitlines() if not line.startswith("#")}
    assert {line.split("{")[0] for line in changed ^ kept} == PER_SLICE


def test_a_pool_whose_devices_are_all_gone_has_no_use_and_no_idle_cost() -> None:
    """Its counters left, its device slice emptied: neither utilisation (it read 0) nor cost."""
    objects = cluster(with_empty=False)
    objects["slices"] += [
        pool_slice(
            "gone-counters", pool="gone", count=2, sharedCounters=[{"name": "g", "counters": MIG}]
        ),
        empty("gone-devices", "gone", 2),
    ]
    objects["claims"].append(new_claim("holder", [result("mig-0", "gone")]))
    collected = samples(collect(**objects))
    assert_no_nan(collected)
    for family, pools in (
        ("utilization_ratio", {"plain", "mig", "nic", "half"}),
        ("idle_hourly_cost", {"plain", "mig", "nic"}),  # usable pools only
    ):
        rows = collected[f"kube_resourcepool_{family}"]
        assert {labels["pool"] for labels, _ in rows} == pools, family
    (state,) = [
        labels for labels, _ in collected["kube_resourcepool_state"] if labels["pool"] == "gone"
    ]
    assert state["state"] == "usable"
    orphaned = collected["kube_resourceclaim_allocation_orphaned"]
    assert [labels["resourceclaim_name"] for labels, _ in orphaned] == ["holder"]
