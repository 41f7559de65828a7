"""Blocks kept between collections: the same rows as blocks cut anew, and untouched blocks kept."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kdraexp.store.changes import EVERYTHING
from kdraexp.store.keptblocks import LOGGED, KeptBlocks, KindBlocks
from kdraexp.store.rows import Flat

SIZE = 4
"""Small blocks (four owners each), so that a few hundred owners make many."""


def flats_of(owners: dict[str, Flat]) -> Any:
    def flats(keys: Iterable[str]) -> Iterable[Flat]:
        return map(owners.__getitem__, keys)

    return flats


steps = st.lists(
    st.tuples(st.sampled_from(["change", "delete", "insert", "empty"]), st.integers(0, 10_000)),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(st.integers(24, 150), steps)
def test_followed_blocks_hold_the_rows_in_order(size: int, changes: list[tuple[str, int]]) -> None:
    """After each change, the blocks hold the owners' flats in order, empty ones left out.

    A block none of whose owners changed is the very tuple it was, but the one a new owner
    joins (one owner changes in at least twelve: fewer than REBUILT).
    """
    serial = itertools.count()
    owners: dict[str, Flat] = {f"o{n:04d}": (f"o{n:04d}", next(serial)) for n in range(size)}
    kept = KeptBlocks.following(None, owners, flats_of(owners), SIZE, EVERYTHING)
    for change, at in changes:
        before = {id(block): block for block in kept.view}
        keys = list(owners)
        previous = owners
        touched: set[str] = set()
        if change == "insert" or not keys:  # at any place, as a list puts a new object
            key = f"new{next(serial)}"
            place = at % (len(keys) + 1)
            items = list(owners.items())
            items.insert(place, (key, (key, next(serial))))
            owners = dict(items)
            touched.add(key)
        else:
            key = keys[at % len(keys)]
            owners = dict(owners)
            if change == "delete":
                del owners[key]
            else:
                owners[key] = (key, next(serial)) if change == "change" else ()
            touched.add(key)
        kept = KeptBlocks.following(kept, owners, flats_of(owners), SIZE, touched)
        assert list(itertools.chain.from_iterable(kept.view)) == [f for f in owners.values() if f]
        assert all(len(block) <= 2 * SIZE for block in kept.view)
        for block in kept.view:
            if not touched & {flat[0] for flat in block}:
                continue
            assert id(block) not in before or before[id(block)] is not block
        untouched = [b for b in before.values() if not touched & {flat[0] for flat in b}]
        now = {id(block) for block in kept.view}
        remade = [block for block in untouched if id(block) not in now]
        # A new owner goes into the block of the owner before it, and an owner without rows is
        # in a block that its flats do not tell: that block is made again.
        unseen = change == "insert" or not keys or not previous.get(key)
        assert len(remade) <= unseen, "an untouched block was cut again"


class Entry:
    def __init__(self, *rows: Flat) -> None:
        self.rows = rows


def test_kind_blocks_follow_entries_for_each_family() -> None:
    """Each family of a kind (its slot in the entries' rows) follows the same entries."""
    entries = {f"k{n}": Entry((f"a{n}", 1.0), (f"b{n}", 2.0)) for n in range(500)}
    kind = KindBlocks()
    first = [kind.blocks(entries, slot) for slot in (0, 1)]
    changed = dict(entries)
    changed["k7"] = Entry((), ("b7", 3.0))
    second = [kind.blocks(changed, slot) for slot in (0, 1)]
    for slot, (was, now) in enumerate(zip(first, second, strict=True)):
        rows = [flat for flat in (e.rows[slot] for e in changed.values()) if flat]
        assert list(itertools.chain.from_iterable(now)) == rows
        assert len({id(b) for b in now} - {id(b) for b in was}) == 1, "one block made again"
    assert kind.blocks(changed, 0) is second[0], "the same entries, the same blocks"


def test_the_log_of_changed_blocks_stays_bounded() -> None:
    """A layout changed forever without a block coming or going logs a bounded number."""
    owners: dict[str, Flat] = {f"o{n}": (f"o{n}", 0) for n in range(40)}
    kept = KeptBlocks.following(None, owners, flats_of(owners), SIZE, EVERYTHING)
    for step in range(1, 2000):
        owners = dict(owners)
        key = f"o{step % 40}"
        owners[key] = (key, step)
        kept = KeptBlocks.following(kept, owners, flats_of(owners), SIZE, {key})
        assert len(kept.layout.log) <= LOGGED * 11
    assert list(itertools.chain.from_iterable(kept.view)) == list(owners.values())
