"""An original family's rows kept sorted, in chunks, following the blocks its rows come in.

Sorting 32,000 claims' rows again because twenty changed costs what the claims number.  The
rows come in blocks that stay the same objects while their owners do
(:mod:`kdraexp.store.keptblocks`): the blocks new since the last time hold the rows that came,
the blocks gone the rows that went, and only those are taken out of their chunk or put in.
A chunk no row came to or went from is the same tuple, which a writer finds again.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from kdraexp.families.family import Row
from kdraexp.store.changes import many
from kdraexp.store.rows import BLOCK_SIZE, Block

LONGEST = 2 * BLOCK_SIZE
"""A chunk longer than this is cut in two halves."""


class SortedRows:
    """Rows sorted by *key* in chunks, and the blocks they were taken from."""

    __slots__ = ("_key", "_lasts", "_source", "chunks")

    def __init__(
        self, source: list[Block], chunks: list[tuple[Row, ...]], key: Callable[[Row], Any]
    ):
        self._key = key
        self._source = {id(block): block for block in source}
        self.chunks = chunks
        """The sorted rows, in chunks."""
        self._lasts = [key(chunk[-1]) for chunk in chunks]

    def follow(
        self, source: list[Block], accepted: Callable[[list[Row]], bool]
    ) -> list[tuple[Row, ...]] | None:
        """The chunks for the rows of *source*, or None when they must be sorted again.

        Each flat of *source* is one row.  Rows that came must be *accepted* (of the family's
        width, with values that sort as their lines), and few.
        """
        now = set(map(id, source))
        came = {
            id(flat): flat for block in source if id(block) not in self._source for flat in block
        }
        went = {
            id(flat): flat
            for number, block in self._source.items()
            if number not in now
            for flat in block
        }
        added = [flat for number, flat in came.items() if number not in went]
        removed = [flat for number, flat in went.items() if number not in came]
        if many(len(added) + len(removed), sum(map(len, source))) or not accepted(added):
            return None
        for row in removed:
            if not self._remove(row):
                return None
        for row in added:
            self._add(row)
        self._source = {id(block): block for block in source}
        return list(self.chunks)

    def _remove(self, row: Row) -> bool:
        key = self._key(row)
        at = bisect.bisect_left(self._lasts, key)
        while at < len(self.chunks):
            chunk = self.chunks[at]
            for place, found in enumerate(chunk):
                if found is row:
                    rest = chunk[:place] + chunk[place + 1 :]
                    if rest:
                        self.chunks[at], self._lasts[at] = rest, self._key(rest[-1])
                    else:
                        del self.chunks[at], self._lasts[at]
                    return True
            if self._lasts[at] != key:  # rows of an equal key may go on in the next chunk
                return False
            at += 1
        return False

    def _add(self, row: Row) -> None:
        key = self._key(row)
        if not self.chunks:
            self.chunks.append((row,))
            self._lasts.append(key)
            return
        at = min(bisect.bisect_left(self._lasts, key), len(self.chunks) - 1)
        rows = list(self.chunks[at])
        bisect.insort(rows, row, key=self._key)
        if len(rows) > LONGEST:
            half = len(rows) // 2
            first, second = tuple(rows[:half]), tuple(rows[half:])
            self.chunks[at : at + 1] = [first, second]
            self._lasts[at : at + 1] = [self._key(first[-1]), self._key(second[-1])]
        else:
            self.chunks[at], self._lasts[at] = tuple(rows), self._key(rows[-1])
