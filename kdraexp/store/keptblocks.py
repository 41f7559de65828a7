"""A family's blocks kept from one collection to the next: a block no change touched is the same.

Cutting 32,000 claims into blocks anew for each collection costs what the claims number, though
twenty changed; a writer then hashes every block's flats to find the ones it wrote.  Kept
blocks are updated for the owners that changed, went or came, and every other block is the
very tuple of the last collection, found again by its identity.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

from kdraexp.store.changes import EVERYTHING, Change, Everything, many, touched_between
from kdraexp.store.rows import BLOCK_SIZE, Block, Flat

Flats = Callable[[Iterable[Any]], Iterable[Flat]]
"""Owners' rows, in their order (made in C where it can: a block may hold a thousand)."""
LOGGED = 4
"""A layout logs at most this many changed blocks per block, then starts a new shape (each
family then looks at every block once)."""
_SERIAL = itertools.count()
"""Numbers for blocks and their versions, never the same twice (a layout cut again included)."""


class Layout:
    """Owners cut in blocks, shared by the families whose rows they own.

    A block keeps its number while it lasts, and has a new version each time its owners change.
    While no block comes or goes (its *shape* stays), the numbers of the blocks changed are
    logged, so that a family's blocks are made again for those only.
    """

    __slots__ = ("_order", "_owners", "_places", "_size", "_versions", "_where", "log", "shape")

    def __init__(self, order: Mapping[Any, Any], size: int) -> None:
        self._size = size
        self._order: list[int] = []
        """Block numbers, in the order written."""
        self._owners: dict[int, list[Hashable]] = {}
        self._versions: dict[int, int] = {}
        self._where: dict[Hashable, int] = {}
        self._places: dict[int, int] | None = None
        self.shape = next(_SERIAL)
        """Changes whenever a block comes or goes."""
        self.log: list[int] = []
        """The blocks changed since the shape last changed, in turn."""
        owners = list(order)
        for start in range(0, len(owners), size):
            self._append(owners[start : start + size])

    @property
    def size(self) -> int:
        """The objects blocks were cut with (kept while they are followed)."""
        return self._size

    @classmethod
    def following(
        cls,
        layout: Layout | None,
        order: Mapping[Any, Any],
        size: int,
        touched: Collection[Hashable] | Everything,
    ) -> Layout:
        """*layout* updated for *touched* (owners changed, gone or new), or blocks cut anew.

        *order* holds every owner, in the order written.  Without *layout*, with
        :data:`EVERYTHING` touched, or when many changed, every block is cut again.
        """
        if layout is None or isinstance(touched, Everything) or many(len(touched), len(order)):
            return cls(order, size)
        layout._update(order, touched)
        return layout

    def blocks(self) -> Iterator[tuple[int, int, list[Hashable]]]:
        """Each block's number, version and owners, in order."""
        owners, versions = self._owners, self._versions
        for number in self._order:
            yield number, versions[number], owners[number]

    def block(self, number: int) -> tuple[int, int, list[Hashable]]:
        """One block's place, version and owners."""
        if self._places is None:
            self._places = dict(zip(self._order, itertools.count()))
        return self._places[number], self._versions[number], self._owners[number]

    def _reshaped(self) -> None:
        self.shape = next(_SERIAL)
        self.log = []
        self._places = None

    def _append(self, owners: list[Hashable]) -> int:
        self._reshaped()
        number = next(_SERIAL)
        self._order.append(number)
        self._owners[number] = owners
        self._versions[number] = number
        self._where.update(zip(owners, itertools.repeat(number)))
        return number

    def _update(self, order: Mapping[Any, Any], touched: Collection[Hashable]) -> None:
        dirty: set[int] = set()
        added: list[Hashable] = []
        for owner in touched:
            number = self._where.get(owner)
            if owner in order:
                if number is None:
                    added.append(owner)
                else:
                    dirty.add(number)
            elif number is not None:  # gone
                del self._where[owner]
                owners = self._owners[number]
                owners.remove(owner)
                if owners:
                    dirty.add(number)
                else:
                    self._order.remove(number)
                    self._reshaped()
                    del self._owners[number], self._versions[number]
                    dirty.discard(number)
        if added:
            dirty |= self._insert(order, added)
        for number in dirty:
            self._versions[number] = next(_SERIAL)
        self.log.extend(dirty)
        if len(self.log) > LOGGED * (len(self._order) + 1):  # bounded: a new shape instead
            self._reshaped()

    def _insert(self, order: Mapping[Any, Any], added: list[Hashable]) -> set[int]:
        """Put new owners after the owner before them in *order*; a block too long is split."""
        listed = list(order)
        places = dict(zip(listed, itertools.count()))
        dirty: set[int] = set()
        for owner in sorted(added, key=places.__getitem__):
            place = places[owner] - 1
            while place >= 0 and listed[place] not in self._where:
                place -= 1
            if place < 0:
                number = self._order[0] if self._order else self._append([])
                self._owners[number].insert(0, owner)
            else:
                before = listed[place]
                number = self._where[before]
                owners = self._owners[number]
                owners.insert(owners.index(before) + 1, owner)
            self._where[owner] = number
            dirty.add(number)
            if len(self._owners[number]) > 2 * self._size:
                dirty.add(self._split(number))
        return dirty

    def _split(self, number: int) -> int:
        """Cut a block in two halves; the number of the second."""
        owners = self._owners[number]
        half = len(owners) // 2
        second = next(_SERIAL)
        self._order.insert(self._order.index(number) + 1, second)
        self._reshaped()
        self._owners[number], self._owners[second] = owners[:half], owners[half:]
        self._versions[second] = second
        self._where.update(zip(owners[half:], itertools.repeat(second)))
        return second


class FamilyBlocks:
    """One family's blocks of a layout, each kept until the layout's block has a new version."""

    __slots__ = ("_made", "_seen", "_shape", "_view")

    def __init__(self) -> None:
        self._made: dict[int, tuple[int, Block]] = {}
        self._view: list[Block] = []
        self._shape = -1
        self._seen = 0
        """How much of the layout's log the view has followed."""

    def view(self, layout: Layout, flats: Flats) -> list[Block]:
        """The family's blocks, in order, () for a block without rows: a list of its own.

        Made again for the blocks the layout logged as changed since the last view, while its
        shape is the same; else each block is looked at.
        """
        made = self._made
        if layout.shape == self._shape:
            view = list(self._view)
            for number in set(layout.log[self._seen :]):
                place, version, owners = layout.block(number)
                block = view[place] = tuple(filter(None, flats(owners)))
                made[number] = (version, block)
        else:
            kept: dict[int, tuple[int, Block]] = {}
            view = []
            for number, version, owners in layout.blocks():
                found = made.get(number)
                if found is None or found[0] != version:
                    found = (version, tuple(filter(None, flats(owners))))
                kept[number] = found
                view.append(found[1])
            self._made = kept
        self._view, self._shape, self._seen = view, layout.shape, len(layout.log)
        return view


class KeptBlocks:
    """One family's owners in blocks, each block's flats kept until one of its owners changes."""

    __slots__ = ("layout", "made", "view")

    def __init__(self, layout: Layout, made: FamilyBlocks, flats: Flats) -> None:
        self.layout = layout
        self.made = made
        self.view = made.view(layout, flats)
        """The blocks in order, () for one without rows (this one's: the next update makes
        its own)."""

    @property
    def size(self) -> int:
        """The objects blocks were cut with (see :class:`Layout`)."""
        return self.layout.size

    @classmethod
    def following(
        cls,
        kept: KeptBlocks | None,
        order: Mapping[Any, Any],
        flats: Flats,
        size: int,
        touched: Collection[Hashable] | Everything,
    ) -> KeptBlocks:
        """*kept* followed for *touched* (see :meth:`Layout.following`), or cut anew."""
        layout = Layout.following(kept.layout if kept else None, order, size, touched)
        return cls(layout, kept.made if kept else FamilyBlocks(), flats)


_ROWS = operator.attrgetter("rows")


class _KindFamily(NamedTuple):
    """One family's blocks of a kind's entries, and what they were made with."""

    entries: Mapping[str, Any]
    made: FamilyBlocks
    view: list[Block]


class KindBlocks:
    """Each family of one kind: its kept blocks, of one layout following the kind's entries."""

    __slots__ = ("_entries", "_families", "_layout")

    def __init__(self) -> None:
        self._layout: Layout | None = None
        self._entries: Mapping[str, Any] | None = None
        """The entries the layout was last cut or followed for."""
        self._families: dict[int, _KindFamily] = {}
        """Per family (its slot in an entry's rows), its blocks and the entries they show."""

    def blocks(
        self, entries: Mapping[str, Any], slot: int, known: Change | None = None
    ) -> list[Block]:
        """The blocks of the family in *slot* for *entries* (a collection's, not changing).

        *known* may say what changed since the entries before (see :func:`touched_between`).
        """
        found = self._families.get(slot)
        if found is not None and found.entries is entries:
            return found.view
        if self._entries is not entries:
            touched: Collection[Hashable] | Everything = EVERYTHING
            if self._entries is not None:
                touched = touched_between(self._entries, entries, known)
            self._layout = Layout.following(self._layout, entries, BLOCK_SIZE, touched)
            self._entries = entries
        assert self._layout is not None
        row = operator.itemgetter(slot)

        def flats(keys: Iterable[str]) -> Iterable[Flat]:
            return map(row, map(_ROWS, map(entries.__getitem__, keys)))

        made = found.made if found is not None else FamilyBlocks()
        view = made.view(self._layout, flats)
        self._families[slot] = _KindFamily(entries, made, view)
        return view
