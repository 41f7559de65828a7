"""Rows laid flat, and in blocks: how a collection keeps a few hundred thousand rows cheaply.

A collection keeps each object's rows of one family laid end to end in one tuple (a *flat*):
one tuple instead of one per row saves a fifth of the memory they take.  A family's flats are
written in *blocks*: a block ends after an object chosen by the hash of its identity, so an
object changed, added or gone changes its own block and no other, and a writer keeps what it
wrote for every other block.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

from kdraexp.families.family import Row

Flat = tuple[Any, ...]
"""Rows of one family laid end to end in one tuple."""
Block = tuple[Flat, ...]
"""Some of a family's rows, as flats: equal blocks write equal text."""
BLOCK_MASK = 63
"""About one object in 64 ends a block (by the hash of its identity)."""
BLOCK_OBJECTS = 1024
"""At most this many objects in a block."""
MAX_BLOCK_ROWS = 4096
"""At most this many rows in a block of sorted rows."""

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


def block_ends(keys: Iterable[Hashable], count: int, mask: int = BLOCK_MASK) -> list[int]:
    """Where the blocks of *count* objects with these *keys* (identities) end.

    After each object whose key hashes to 0 under *mask* (about one in mask + 1), and at most
    BLOCK_OBJECTS apart.
    """
    chosen = map(operator.not_, map(mask.__and__, map(hash, keys)))  # all in C
    ends, last = [], 0
    for index in itertools.compress(itertools.count(1), chosen):
        while index - last > BLOCK_OBJECTS:
            last += BLOCK_OBJECTS
            ends.append(last)
        ends.append(last := index)
    while count > last:
        last = min(count, last + BLOCK_OBJECTS)
        ends.append(last)
    return ends


def mask_for(rows_each: float) -> int:
    """A block mask giving blocks of about 64 rows to objects of *rows_each* rows."""
    objects = max(1, int(64 / max(rows_each, 1.0)))
    return (1 << (objects.bit_length() - 1)) - 1


def blocks(flats: list[Flat], ends: list[int]) -> Iterator[Block]:
    """The blocks of *flats* ending at *ends*, the empty flats left out."""
    start = 0
    for end in ends:
        block = tuple(filter(None, flats[start:end]))
        if block:
            yield block
        start = end
