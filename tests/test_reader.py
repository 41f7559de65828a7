"""Reading one kind's objects: pages and watch events alike, and reading again for new classes."""

from __future__ import annotations

from typing import Any

import msgspec

from kdraexp.allocator.facts import SliceFacts
from kdraexp.cel.matching import Matcher
from kdraexp.dra.listing import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kdraexp.families.selection import select
from kdraexp.store.changes import EVERYTHING
from kdraexp.store.collection import CollectionBuilder
from kdraexp.store.reader import KindReader
from kdraexp.store.sharding import Shard
from tests.objects import NVIDIA, classy, gpu, new_claim, pool_slice


def _raw(obj: dict[str, Any]) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(obj))


def _live(kind: Any, builder: CollectionBuilder | None = None) -> KindReader:
    builder = builder or CollectionBuilder(select(), Matcher())
    builder.classes_listed()
    return builder.reader(kind, live=True)


def test_events_add_change_and_delete_entries_in_place() -> None:
    """An event reads its object as a page would; a changed object keeps its place."""
    reader = _live(RESOURCE_CLAIMS)
    names = ["a", "b", "c", *(f"x{n}" for n in range(20))]
    for name in names:
        assert reader.apply("ADDED", _raw(new_claim(name))) == (f"uid-{name}", "1")
    assert list(reader.entries) == [f"uid-{name}" for name in names]
    assert reader.changed and reader.touched is EVERYTHING  # all of them: followers start again
    reader.changed, reader.touched = False, set()
    before = reader.entries["uid-b"]
    changed = new_claim("b", reserved=True)
    changed["metadata"]["resourceVersion"] = "2"
    assert reader.apply("MODIFIED", _raw(changed)) == ("uid-b", "2")
    assert list(reader.entries)[:3] == ["uid-a", "uid-b", "uid-c"]
    assert reader.entries["uid-b"] is not before and reader.entries["uid-b"].version == "2"
    assert reader.changed and reader.touched == {"uid-b"}
    reader.changed = False
    assert reader.apply("DELETED", _raw(new_claim("a"))) == ("uid-a", "1")
    assert list(reader.entries)[:2] == ["uid-b", "uid-c"] and reader.changed
    reader.changed = False
    reader.apply("DELETED", _raw(new_claim("a")))  # again: nothing left to drop
    assert not reader.changed


def test_an_object_moved_to_another_shard_leaves_this_one() -> None:
    """A slice whose pool another shard now writes is dropped here, and remembered as skipped."""
    shard = Shard(0, 2)
    mine = next(f"p{i}" for i in range(64) if shard.owns(f"{NVIDIA}/p{i}"))
    theirs = next(f"p{i}" for i in range(64) if not shard.owns(f"{NVIDIA}/p{i}"))
    reader = _live(RESOURCE_SLICES, CollectionBuilder(select(), Matcher(), shard=shard))
    reader.apply("ADDED", _raw(pool_slice("s", [gpu("g0")], pool=mine)))
    assert list(reader.entries) == ["/s"]
    reader.changed = False
    moved = pool_slice("s", [gpu("g0")], pool=theirs)
    moved["metadata"]["resourceVersion"] = "2"
    reader.apply("MODIFIED", _raw(moved))
    assert reader.entries == {} and reader.changed
    assert reader.skipped == {"/s": "2"}


def test_a_class_change_reads_the_kept_slices_again() -> None:
    """Watching, a new DeviceClass matches the slices' devices again from their kept JSON."""
    builder = CollectionBuilder(select(), Matcher())
    classes = builder.reader(DEVICE_CLASSES, live=True)
    classes.apply("ADDED", _raw(classy("gpu", f'device.driver == "{NVIDIA}"')))
    builder.classes_listed()
    slices = builder.reader(RESOURCE_SLICES, live=True)
    slices.apply("ADDED", _raw(pool_slice("s", [gpu("g0"), gpu("g1")])))

    def matched() -> list[tuple[str, ...]]:
        facts: SliceFacts = slices.entries["/s"].facts
        return [device.classes for device in facts.devices]

    assert matched() == [("gpu",), ("gpu",)]
    assert slices.entries["/s"].source is not None  # kept to be read again
    classes.apply("ADDED", _raw(classy("all", "true")))
    assert builder.classes_listed()  # what devices are matched against changed
    slices.changed = False
    before = slices.entries["/s"]
    slices.reread("/s")
    assert slices.entries["/s"] is not before and slices.changed
    assert matched() == [("gpu", "all"), ("gpu", "all")]


def test_a_watched_slice_has_a_collections_budget_of_its_own() -> None:
    """A watch's events come one at a time: each slice read begins the matcher's count again.

    A list's slices share one collection's count.
    """
    matcher = Matcher()
    builder = CollectionBuilder(select(), matcher)
    builder.classes_listed()
    watched, listed = builder.reader(RESOURCE_SLICES, live=True), builder.reader(RESOURCE_SLICES)
    begun = matcher.collection
    for n in range(3):
        watched.apply("ADDED", _raw(pool_slice(f"s{n}", [gpu("g0")], pool=f"p{n}")))
    assert matcher.collection == begun + 3
    listed.page([_raw(pool_slice(f"t{n}", [gpu("g0")], pool=f"q{n}")) for n in range(3)])
    assert matcher.collection == begun + 3
