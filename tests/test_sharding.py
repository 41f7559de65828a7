"""Sharding: every shard's samples together are the unsharded samples, none twice."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import yaml

from benchmarks.cluster import cluster, node_name
from kdraexp.dra.listing import RESOURCE_SLICES
from kdraexp.families import FAMILIES, KINDS
from kdraexp.families.selection import select
from kdraexp.store.collection import Collection
from kdraexp.store.sharding import Part, Shard, ordinal
from tests.collect import collect, samples
from tests.test_file import EXAMPLE

RESOURCES = "resourceclaims,resourceslices,deviceclasses,devicetaintrules,pods"


def example() -> dict[str, Any]:
    objects: dict[str, Any] = {}
    for item in yaml.safe_load(EXAMPLE.read_text())["items"]:
        objects.setdefault(str(item["kind"]), []).append(item)
    return {
        "claims": objects.get("ResourceClaim", []),
        "slices": objects.get("ResourceSlice", []),
        "classes": objects.get("DeviceClass", []),
        "rules": objects.get("DeviceTaintRule", []),
        "pods": objects.get("Pod", []),
    }


def synthetic() -> dict[str, Any]:
    """The benchmark's cluster, a claim with devices in eight pools, and a pending claim.

    The spanning claim holds the odd devices of nodes 1 to 8, which no other claim holds.
    """
    made = cluster(40)
    spanning = copy.deepcopy(made["resourceclaims"][0])
    spanning["metadata"].update(name="spanning", uid="spanning-uid")
    results = spanning["status"]["allocation"]["devices"]["results"]
    results[:] = [
        {**results[0], "pool": node_name(node), "device": "gpu-1"} for node in range(1, 9)
    ]
    waiting = copy.deepcopy(made["resourceclaims"][0])
    waiting["metadata"].update(name="waiting", uid="waiting-uid")
    del waiting["status"]
    return {
        "claims": [*made["resourceclaims"], spanning, waiting],
        "slices": made["resourceslices"],
        "classes": made["deviceclasses"],
    }


def written(collection: Collection) -> Counter[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Each sample written, as (family, labels, value)."""
    return Counter(
        (family, tuple(sorted(labels.items())), value)
        for family, found in samples(collection).items()
        for labels, value in found
    )


@pytest.mark.parametrize("objects", [example(), synthetic()], ids=["example", "synthetic"])
@pytest.mark.parametrize("total", [2, 3])
def test_union_of_shards_is_the_whole(objects: dict[str, Any], total: int) -> None:
    """Each sample is written by exactly one shard, and the union equals the unsharded set.

    Sharded, the families that join an object with every pool or claim are not written.
    """
    chosen = select(resources=RESOURCES, sharded=True)
    assert {f.name for f in select(resources=RESOURCES).families} - {
        f.name for f in chosen.families
    } == {f.name for f in FAMILIES if f.whole_cluster and f.needs <= set(RESOURCES.split(","))}
    whole = written(collect(**objects, selection=chosen))
    union: Counter[tuple[str, tuple[tuple[str, str], ...], float]] = Counter()
    for index in range(total):
        part = written(collect(**objects, shard=Shard(index, total), selection=chosen))
        assert part, f"shard {index} of {total} wrote nothing"
        union.update(part)
    assert union == whole


def test_classes_on_shard_zero_and_claims_follow_their_pool() -> None:
    """Classes are written by shard 0 and read by all; a claim goes where its first pool goes."""
    objects = synthetic()
    for index in range(3):
        families = samples(collect(**objects, shard=Shard(index, 3)))
        assert bool(families.get("kube_deviceclass_info")) == (index == 0)
    item = _decoded(objects["slices"][0])
    placed = KINDS[RESOURCE_SLICES].shard_key(item)  # type: ignore[misc]
    owners = [i for i in range(3) if Shard(i, 3).part(placed) is Part.WRITE]
    assert len(owners) == 1


def test_ordinal_and_bounds() -> None:
    """A StatefulSet pod's ordinal; a shard outside its total is refused."""
    assert ordinal("kdraexp-12") == 12
    assert ordinal("kdra.exp-0") == 0
    for name in ("kdraexp", "kdraexp-1\n", "evil\nkdraexp-1", "Kdraexp-1", "kdraexp-1 ", "-1"):
        with pytest.raises(ValueError, match="not a StatefulSet pod name"):
            ordinal(name)
    with pytest.raises(ValueError, match="expected 0 <= shard < total"):
        Shard(3, 3)


def _decoded(item: dict[str, object]) -> object:
    import msgspec

    from kdraexp.dra.listing import RESOURCE_SLICES

    return RESOURCE_SLICES.decoder.decode(msgspec.json.encode(item))
