"""Rows laid flat, and in blocks: how a collection keeps a few hundred thousand rows cheaply.

A collection keeps each object's rows of one family laid end to end in one tuple (a *flat*):
one tuple instead of one per row saves a fifth of the memory they take.  A family's flats are
written in *blocks*, kept from one collection to the next (:mod:`kdraexp.store.keptblocks`): an
object changed, added or gone changes its own block and no other, and a writer keeps what it
wrote for every other block.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kdraexp.families.family import Row

Flat = tuple[Any, ...]
"""Rows of one family laid end to end in one tuple."""
Block = tuple[Flat, ...]
"""Some of a family's rows, as flats: equal blocks write equal text."""
BLOCK_SIZE = 64
"""Objects a kind's blocks are cut with (a block is cut in two past twice as many)."""
BLOCK_OBJECTS = 1024
"""At most this many objects in a block of the current generation's slices."""

LABELS = operator.itemgetter(slice(0, -1))
"""A row's label values (all but its value)."""


def flatten(rows: Iterable[Row]) -> Flat:
    """Rows, each label set once (the first value wins), laid end to end."""
    found = tuple(rows)
    if len(found) < 2:
        return found[0] if found else ()
    if len(set(map(LABELS, found))) == len(found):
        return tuple(itertools.chain.from_iterable(found))  # no label set twice: in C
    seen: set[tuple[Any, ...]] = set()
    flat: list[Any] = []
    for row in found:
        labels = row[:-1]
        if labels not in seen:
            seen.add(labels)
            flat.extend(row)
    return tuple(flat)


def expand(flat: Flat, width: int) -> Iterator[Row]:
    """The rows of *flat*, each *width* long."""
    for start in range(0, len(flat), width):
        yield flat[start : start + width]


def rows_of(block: Block, width: int) -> Sequence[Row]:
    """The rows of a block: its flats themselves when each holds one row (in C), else sliced."""
    if not any(map(width.__ne__, map(len, block))):
        return block
    return [flat[start : start + width] for flat in block for start in range(0, len(flat), width)]


def size_for(rows_each: float) -> int:
    """Objects a block is cut with, to hold about 64 rows of objects of *rows_each* rows."""
    return max(1, int(64 / max(rows_each, 1.0)))
