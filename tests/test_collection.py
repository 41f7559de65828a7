"""The collection core: what a page of objects may become, and which entries are kept."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from twisted.internet.defer import Deferred

from kdraexp.cel.matching import Matcher
from kdraexp.dra.listing import RESOURCE_CLAIMS, RESOURCE_SLICES, ListError, Reason
from kdraexp.families.selection import select
from kdraexp.store import collection
from kdraexp.store import reader as reading
from kdraexp.store.collection import CollectionBuilder
from tests.conftest import result_of
from tests.objects import new_claim, pool_slice

LIMIT = 1024 * 1024
"""A response limit of 1 MiB: a page of 1,024 devices at most, objects of 64 KiB."""


def _page(objects: list[dict[str, Any]]) -> list[msgspec.Raw]:
    return [msgspec.Raw(msgspec.json.encode(o)) for o in objects]


def _bare(count: int) -> list[dict[str, Any]]:
    return [{"name": f"d{i}"} for i in range(count)]


def _builder() -> CollectionBuilder:
    return CollectionBuilder(select(), Matcher(), limit=LIMIT)


def test_a_page_of_more_devices_than_the_limit_allows_is_too_large() -> None:
    """Devices sent in a few bytes each still become a kilobyte read: a page holds so many.

    At a 1 MiB limit, 1,024 devices; 1,025 bare ones (16 KB sent) fail the list, in one slice or
    spread over slices, naming what was too large.  Within it, the page is read.
    """
    builder = _builder()
    builder.reader(RESOURCE_SLICES).page(_page([pool_slice("s", _bare(1024))]))
    for objects in (
        [pool_slice("s", _bare(1025))],
        [pool_slice(f"s{i}", _bare(41), pool=f"p{i}") for i in range(25)],
    ):
        with pytest.raises(ListError) as raised:
            _builder().reader(RESOURCE_SLICES).page(_page(objects))
        assert raised.value.reason == Reason.TOO_LARGE and raised.value.public
        assert str(raised.value).endswith(
            "TooLarge: a page of resourceslices holds more than 1024 devices, each counted as "
            "1024 bytes of --max-response-bytes=1048576: read, they would not fit beside it"
        )


def test_an_object_of_more_than_a_share_of_the_limit_is_too_large() -> None:
    """One object may be a sixteenth of the limit: read, it becomes many times its size."""
    reader = _builder().reader(RESOURCE_CLAIMS)
    fine = new_claim("fine", None)
    fine["metadata"]["annotations"] = {"note": "x" * (LIMIT // reading.OBJECT_SHARE - 400)}
    reader.page(_page([fine]))
    fat = new_claim("fat", None)
    fat["metadata"]["annotations"] = {"note": "x" * (LIMIT // reading.OBJECT_SHARE)}
    with pytest.raises(ListError) as raised:
        _builder().reader(RESOURCE_CLAIMS).page(_page([fat]))
    assert raised.value.reason == Reason.TOO_LARGE
    assert "ResourceClaim fat is 65" in str(raised.value)
    assert "more than 1/16 of --max-response-bytes=1048576" in str(raised.value)


def test_objects_without_a_resource_version_are_kept_while_their_json_is_the_same() -> None:
    """A file, or an API that sends no ``resourceVersion``: the JSON itself is the version.

    Listed again alike, an object keeps its entry (not read again: 64,000 devices took 5 s and
    580 MiB a scrape); a changed one is read again.
    """
    store = collection.Store()
    claims = [new_claim("a"), new_claim("b")]
    for claim in claims:
        claim["metadata"].pop("resourceVersion", None)

    def listed(objects: list[dict[str, Any]]) -> dict[str, reading.Entry]:
        builder = CollectionBuilder(select(), Matcher(), store)
        builder.reader(RESOURCE_CLAIMS).page(_page(objects))
        builder.classes_listed()
        result_of(Deferred.fromCoroutine(builder.finish()))
        return dict(store.entries(RESOURCE_CLAIMS.plural))

    first = listed(claims)
    assert len(first) == 2
    claims[1]["metadata"]["labels"] = {"team": "b"}
    again = listed(claims)
    (same, changed) = (key for key in first)
    assert again[same] is first[same]
    assert again[changed] is not first[changed]


def test_a_change_of_every_object_keeps_nothing_of_the_objects_before() -> None:
    """What changed is recorded for the followers, but not when every object did.

    A record holds the objects before it until the kind changes again: after a change of every
    object, half the exporter's memory for as long as the cluster then stays calm.  One object
    changed is recorded (the followers read the record instead of comparing every object).
    """
    store = collection.Store()

    def listed(objects: list[dict[str, Any]]) -> tuple[Any, Any]:
        builder = CollectionBuilder(select(), Matcher(), store)
        builder.reader(RESOURCE_CLAIMS).page(_page(objects))
        builder.classes_listed()
        result_of(Deferred.fromCoroutine(builder.finish()))
        return store.entries(RESOURCE_CLAIMS.plural), store.facts_of(RESOURCE_CLAIMS.plural)

    claims = [new_claim(f"c{i}") for i in range(16)]
    entries, facts = listed(claims)
    for claim in claims:
        claim["metadata"]["resourceVersion"] = "2"
    listed(claims)
    records = [
        record
        for state in store.kinds.values()
        for record in (state.changes, state.fact_changes)
        if record is not None
    ]
    assert not [record for record in records if record[0] is entries or record[0] is facts]
    entries, facts = listed(claims)
    claims[0]["metadata"]["resourceVersion"] = "3"
    listed(claims)
    state = store.kinds[RESOURCE_CLAIMS.plural]
    assert state.changes is not None and state.changes[0] is entries
    assert state.fact_changes is not None and state.fact_changes[0] is facts


def test_a_list_of_mostly_new_objects_forgets_the_last_collection_as_it_is_read() -> None:
    """Past half of a kind's objects new, what was made of the last list is dropped at once.

    Every follower would make everything again; kept, the last collection stayed alive beside
    the new one until it was complete (at 64,000 devices, the peak of such a scrape).  The
    collection made then is the one a fresh store makes; a list with fewer new objects keeps
    what it can follow.
    """
    store = collection.Store()
    at: list[str] = []
    """The claims at whose reading the store forgot."""
    slices = [pool_slice("s", [{"name": f"gpu-{i}"} for i in range(4)])]

    def listed(claims: list[dict[str, Any]], store: collection.Store) -> collection.Collection:
        builder = CollectionBuilder(select(), Matcher(), store)
        builder.reader(RESOURCE_SLICES).page(_page(slices))
        builder.classes_listed()
        reader = builder.reader(RESOURCE_CLAIMS)
        for claim in claims:  # one page an object: the moment it forgets is seen
            state = store.kinds.get(RESOURCE_CLAIMS.plural)
            reader.page(_page([claim]))
            if state is not None and store.kinds.get(RESOURCE_CLAIMS.plural) is not state:
                at.append(claim["metadata"]["name"])
                assert store.last is None
                assert RESOURCE_CLAIMS.plural not in store.kinds
        return result_of(Deferred.fromCoroutine(builder.finish()))

    claims = [new_claim(f"c{i:02d}") for i in range(16)]
    listed(claims, store)
    for claim in claims[:8]:
        claim["metadata"]["resourceVersion"] = "2"
    listed(claims, store)
    assert at == []  # half of them new: followed
    for claim in claims:
        claim["metadata"]["resourceVersion"] = "3"
    made = listed(claims, store)
    assert at == ["c08"]  # at the ninth of sixteen, once
    fresh = listed(claims, collection.Store())
    assert [(f.name, rows) for f, rows in made.families()] == [
        (f.name, rows) for f, rows in fresh.families()
    ]


def test_what_failed_collections_read_is_kept_once_not_once_each() -> None:
    """A collection that fails keeps what it read for the next one, and no more than that.

    A list that keeps failing (pods refused while claims come and go) read 3,000 new claims a
    scrape, each kept for good: 67 to 207 MiB in 30 scrapes.  What is kept is what the last
    attempt read; the claims gone since are dropped with the attempt that no longer saw them.
    """
    store = collection.Store()
    for attempt in range(30):
        claims = [new_claim(f"c{attempt}-{i}") for i in range(100)]
        builder = CollectionBuilder(select(), Matcher(), store)
        builder.classes_listed()
        builder.reader(RESOURCE_CLAIMS).page(_page(claims))
        # another list failed: the collection is not finished
    assert len(store.warm[RESOURCE_CLAIMS.plural]) == 100


def test_a_page_refused_as_too_large_stays_refused_when_tried_again() -> None:
    """What earlier tries of a refused page read does not let a later try through.

    The objects read before the bound was passed are kept for the next collection; counted
    again, they still fill the page (500, 500, 500, then 200 with 256,000 devices before).
    """
    store = collection.Store()
    slices = [pool_slice(f"s{i}", _bare(100), pool=f"p{i}") for i in range(20)]
    for _ in range(4):
        builder = CollectionBuilder(select(), Matcher(), store, limit=LIMIT)
        builder.classes_listed()
        with pytest.raises(ListError) as raised:
            builder.reader(RESOURCE_SLICES).page(_page(slices))
        assert raised.value.reason == Reason.TOO_LARGE
