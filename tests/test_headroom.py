"""kube_resourcepool_allocatable_devices: the allocator's first fit over hand-made pools."""

from __future__ import annotations

from typing import Any

from kdraexp.store.collection import Collection
from tests.collect import collect, values
from tests.objects import classy, counters, device, gpu, new_claim, pool_slice, result

WHOLE = classy("gpu", "device.attributes['gpu.nvidia.com'].type == 'gpu'")
MIG = classy("mig", "device.attributes['gpu.nvidia.com'].type == 'mig'")


def fits(collection: Collection) -> dict[tuple[str, ...], float]:
    return values(
        collection, "kube_resourcepool_allocatable_devices", "pool", "node_name", "deviceclass_name"
    )


def mig_gpu(pool: str = "node", slices: int = 4) -> list[dict[str, Any]]:
    """One GPU in dynamic MIG mode.

    The whole GPU, a 1g partition per memory slice, a 2g partition over slices 0 and 1.
    """
    every = counters(**{f"memory_slice_{i}": "1" for i in range(slices)})
    every.update(counters(multiprocessors="98"))

    def partition(name: str, used: list[int], sms: str) -> dict[str, Any]:
        needed = counters(multiprocessors=sms, **{f"memory_slice_{i}": "1" for i in used})
        return gpu(name, "mig", consumesCounters=[{"counterSet": "set", "counters": needed}])

    devices = [
        gpu("gpu-0", consumesCounters=[{"counterSet": "set", "counters": every}]),
        *(partition(f"mig-1g-{i}", [i], "14") for i in range(slices)),
        partition("mig-2g-0", [0, 1], "28"),
    ]
    return [
        pool_slice(
            "a-counters", pool=pool, count=2, sharedCounters=[{"name": "set", "counters": every}]
        ),
        pool_slice("b-devices", devices, pool=pool, count=2),
    ]


def test_partitions_block_each_other() -> None:
    """Nothing used: one whole GPU fits, or four 1g partitions (the 2g overlaps two of them)."""
    written = fits(collect(slices=mig_gpu(), classes=[WHOLE, MIG]))
    assert written == {("node", "node", "gpu"): 1, ("node", "node", "mig"): 4}


def test_one_partition_in_use() -> None:
    """A 1g partition in use: the whole GPU no longer fits, three 1g partitions do."""
    claims = [new_claim("c", [result("mig-1g-1", "node")])]
    written = fits(collect(slices=mig_gpu(), claims=claims, classes=[WHOLE, MIG]))
    assert written == {("node", "node", "gpu"): 0, ("node", "node", "mig"): 3}


def test_first_fit_takes_the_order_of_the_slices() -> None:
    """The 2g partition first (its slice sorts first): it takes slices 0 and 1, two 1g remain."""
    slices = mig_gpu()
    two_g = slices[1]["spec"]["devices"].pop()
    slices[1]["spec"]["pool"]["resourceSliceCount"] = 3
    slices[0]["spec"]["pool"]["resourceSliceCount"] = 3
    slices.append(pool_slice("a-first", [two_g], pool="node", count=3))
    written = fits(collect(slices=slices, classes=[MIG]))
    assert written == {("node", "node", "mig"): 3}


def test_a_device_consuming_two_counter_sets() -> None:
    """A partition consuming from two sets blocks the ones consuming either."""
    sets = [
        {"name": "left", "counters": counters(memory="1")},
        {"name": "right", "counters": counters(memory="1")},
    ]

    def mig(name: str, *used: str) -> dict[str, Any]:
        consumes = [{"counterSet": s, "counters": counters(memory="1")} for s in used]
        return gpu(name, "mig", consumesCounters=consumes)

    devices = [mig("a-both", "left", "right"), mig("b-left", "left"), mig("c-right", "right")]
    slices = [pool_slice("s", devices, pool="node", sharedCounters=sets)]
    assert fits(collect(slices=slices, classes=[MIG])) == {("node", "node", "mig"): 1}
    claims = [new_claim("c", [result("b-left", "node")])]
    assert fits(collect(slices=slices, claims=claims, classes=[MIG])) == {
        ("node", "node", "mig"): 1
    }


def test_unusable_pools_and_tainted_devices_fit_nothing() -> None:
    """An incomplete pool fits none; a tainted GPU is skipped."""
    taint = [{"key": "k", "effect": "NoSchedule"}]
    slices = [
        pool_slice("half", [gpu("g")], pool="half", count=2),
        pool_slice("ok", [gpu("g"), gpu("t", taints=taint)], pool="ok"),
    ]
    assert fits(collect(slices=slices, classes=[WHOLE])) == {
        ("half", "half", "gpu"): 0,
        ("ok", "ok", "gpu"): 1,
    }


def test_shareable_device_by_its_request_policy() -> None:
    """A device allowing several allocations: as many as its default share leaves room for."""
    nic = device("nic", allowMultipleAllocations=True)
    nic["capacity"] = {
        "bandwidth": {"value": "800G", "requestPolicy": {"default": "100G"}},
        "queues": {"value": "16"},
    }
    shared = classy("nic", "device.allowMultipleAllocations")
    slices = [pool_slice("s", [nic], pool="node")]
    assert fits(collect(slices=slices, classes=[shared])) == {("node", "node", "nic"): 1}, (
        "queues has no policy: a request naming no capacity takes all 16 queues"
    )
    del nic["capacity"]["queues"]
    assert fits(collect(slices=slices, classes=[shared])) == {("node", "node", "nic"): 8}
    used = result("nic", "node", consumedCapacity={"bandwidth": "300G"}, shareID="x")
    written = fits(collect(slices=slices, claims=[new_claim("c", [used])], classes=[shared]))
    assert written == {("node", "node", "nic"): 5}


PROFILE = classy("mig-1g", "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
"""Selects partitions by an attribute the whole GPU lacks: an error on the whole GPU."""


def test_a_selector_error_ends_the_walk() -> None:
    """NVIDIA's layout, the whole GPU first: a class selecting on ``profile`` fits none.

    The allocator evaluates the class on the whole GPU before any partition and fails the claim.
    Once the whole GPU is in use it is skipped before any selector, and what is left fits.
    """
    written = fits(collect(slices=mig_gpu(), classes=[PROFILE]))
    assert written == {("node", "node", "mig-1g"): 0}
    slices = mig_gpu()
    devices = slices[1]["spec"]["devices"]
    devices.append(devices.pop(0))  # the whole GPU last: four 1g partitions are reached first
    assert fits(collect(slices=slices, classes=[PROFILE])) == {("node", "node", "mig-1g"): 4}


def test_a_device_in_use_is_skipped_before_its_selectors() -> None:
    """The erroring device allocated: skipped; the partitions after it are counted.

    Two GPUs without counters, so that what the first holds does not block the partitions.
    """
    devices = [gpu("gpu-0"), gpu("mig-a", "mig"), gpu("mig-b", "mig")]
    slices = [pool_slice("s", devices, pool="node")]
    assert fits(collect(slices=slices, classes=[PROFILE])) == {("node", "node", "mig-1g"): 0}
    claims = [new_claim("c", [result("gpu-0", "node")])]
    assert fits(collect(slices=slices, claims=claims, classes=[PROFILE])) == {
        ("node", "node", "mig-1g"): 2
    }
    tainted = [gpu("gpu-0", taints=[{"key": "k", "effect": "NoSchedule"}]), *devices[1:]]
    slices = [pool_slice("s", tainted, pool="node")]
    assert fits(collect(slices=slices, classes=[PROFILE])) == {("node", "node", "mig-1g"): 0}, (
        "a tainted device is not skipped before the selectors: the error comes first"
    )


def test_a_selector_error_after_the_count_is_met() -> None:
    """Devices taken before the erroring one still count: the walk stops there, not sooner."""
    devices = [gpu("mig-a", "mig"), gpu("gpu-0"), gpu("mig-b", "mig")]
    slices = [pool_slice("s", devices, pool="node")]
    assert fits(collect(slices=slices, classes=[PROFILE])) == {("node", "node", "mig-1g"): 1}
