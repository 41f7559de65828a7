"""The pool families: generation, completeness, counters and a utilisation that counts once."""

from __future__ import annotations

from kdraexp.store.collection import Collection
from tests.collect import collect, values
from tests.objects import gpu, new_claim, pool_slice, result
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
    counter = pool(written, "counter", "counter", "state")
    assert counter[("node", "memory-slice-0", "consumed")] == 1
    assert counter[("node", "memory-slice-1", "consumed")] == 0
    assert counter[("node", "multiprocessors", "total")] == 98
    assert counter[("node", "multiprocessors", "consumed")] == 14
    assert pool(written, "utilization_ratio") == {("node",): 1.0}, (
        "memory slice 0 is the most used counter: the GPU cannot be allocated whole"
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
