"""Each family's text, kept compressed and reused until the rows it was made of change.

A family's rows change only when a list it reads changes (:meth:`Collection.key`), so its text is
kept deflated and every later scrape sends the same bytes.  When its rows change, only the blocks
of rows a change touched (:mod:`kdraexp.store.rows`) are written again: each block is deflated on
its own as a raw deflate stream ending with a sync flush, so blocks and families follow one
another.  The gzip body is one gzip member: its header, every family's blocks, the scrape's own
tail (the exporter's metrics) with the final block, and the trailer, whose CRC-32 is combined
from the blocks' without their text.  A plain body inflates the same blocks as it is written.

Nothing is written at once: a body is a sequence of pieces of at most :data:`PIECE` bytes, made as
the connection drains, so forty concurrent scrapes hold forty pieces, not forty bodies.
"""

from __future__ import annotations

import itertools
import operator
import re
import struct
import zlib
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any, NamedTuple

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from kdraexp.exposition import text as exposition
from kdraexp.exposition.sortedrows import SortedRows
from kdraexp.exposition.text import encode_family
from kdraexp.families.family import Family, Row
from kdraexp.store.collection import Collection
from kdraexp.store.rows import BLOCK_SIZE, LABELS, Block, expand, rows_of
from kdraexp.util.singleflight import KeyedFlights
from kdraexp.util.turns import Turns

GZIP_LEVEL = 1
"""zlib level for gzip bodies: level 1 compresses a scrape about 27 to 1, at half the CPU of
level 6 for 8% more bytes (measured on 64,000 capacity samples)."""
PIECE = 64 * 1024
"""Bytes written to a connection at a time."""
INFLATE_INPUT = 4 * 1024
"""Compressed bytes handed to the inflater at a time (about 100 KiB of text)."""
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
"""A gzip member's header: deflate, no name, no time, unknown system."""
_RAW = -zlib.MAX_WBITS
"""wbits for a raw deflate stream (no zlib or gzip framing)."""
SORTED_RUN = 4096
"""Rows sorted at a time before the runs are merged (at 32,000 rows a sort in one go holds the
reactor for tens of milliseconds)."""
BLOCK_WINDOW_BITS = 13
BLOCK_MEMORY_LEVEL = 6
"""A block's compressor: an 8 KiB window and smaller tables.  A block is a few KiB of text, so
it compresses as well, and the compressor is made five times faster (a first scrape makes
thousands)."""


@attrs.frozen
class Segment:
    """One family's text, deflated, flushed to a byte boundary but not finished."""

    key: Hashable
    data: tuple[bytes, ...]
    """The deflated text, in parts (a family's blocks, kept as they are, not joined)."""
    crc: int
    """CRC-32 of the text."""
    size: int
    """Length of the text."""
    zeros: int = -1
    """CRC-32 of as many zero bytes as the text has (for :func:`crc32_combine`), or -1."""


class Written(NamedTuple):
    """A block written and its segment."""

    block: Block
    segment: Segment
    content: int
    """The hash of the block's length and first flat: a candidate, compared in full."""
    identity: int
    """The hash of its flats' identities."""


class WrittenBlocks:
    """One family's blocks as last written, found again by the next collection's blocks.

    A block kept from the last collection (see :mod:`kdraexp.store.keptblocks`) is the same
    object.  Others are found by the identities of their flats (hashed: a tuple of them for each
    block would take megabytes), checked one by one: cheaper than hashing their contents, and
    sound, as what is kept holds the flats, so no other object can have their identities.  An
    object read again with the same rows has new flats: then by its length and first flat, and
    compared in full.
    """

    __slots__ = ("_by_content", "_by_identity", "_by_object")

    def __init__(self) -> None:
        self._by_identity: dict[int, Written] = {}
        self._by_content: dict[int, Written] = {}
        self._by_object: dict[int, Written] = {}

    def find(self, block: Block) -> Written | tuple[int, int]:
        """The block as written, with this block; else its (content, identity) hashes."""
        found = self._by_object.get(id(block))
        if found is not None and found.block is block:
            return found
        identity = hash(tuple(map(id, block)))
        found = self._by_identity.get(identity)
        if found is not None and (
            len(found.block) == len(block) and all(map(operator.is_, found.block, block))
        ):
            return Written(block, found.segment, found.content, identity)
        content = hash((len(block), block[0]))
        same = self._by_content.get(content)
        if same is not None and same.block == block:
            return Written(block, same.segment, content, identity)  # with the new flats
        return content, identity

    def keep(self, written: Written) -> None:
        """Keep *written* for the next collection to find."""
        self._by_object[id(written.block)] = written
        self._by_identity[written.identity] = self._by_content[written.content] = written


class Renderer:
    """Keeps every family's segment; renders a family again only when its key changed."""

    def __init__(self, clock: IReactorTime) -> None:
        self._turns = Turns(clock)
        """One budget for all rendering: thirty families of 10 ms each are 300 ms too."""
        self._segments: dict[str, Segment] = {}
        self._rendering: KeyedFlights[str, Segment] = KeyedFlights(abandon=False)
        """Per family being rendered, its rendering, shared by the scrapes waiting for it (one
        that goes lets the rendering run on: the segment is kept for the next)."""
        self._joined: tuple[tuple[Hashable, ...], int, int] = ((), 0, 0)
        """The keys of the last segments joined, their combined CRC and size."""
        self._body: tuple[Hashable, list[Segment], list[bytes], int] | None = None
        """The last gzip body's segments and tail, its pieces and length."""

    def segments(self, collection: Collection) -> Deferred[list[Segment]]:
        """The segments of every family of *collection* that has rows, in the order written."""
        return Deferred.fromCoroutine(self._all(collection))

    async def _all(self, collection: Collection) -> list[Segment]:
        found = []
        for family in collection.selection.families:
            key = collection.key(family)
            segment = self._segments.get(family.name)
            if segment is None or segment.key != key:
                segment = await self._render(collection, family.name, key)
            if segment.size:
                found.append(segment)
        return found

    def _render(self, collection: Collection, name: str, key: Hashable) -> Deferred[Segment]:
        """Render one family, once however many scrapes want it at the same time."""
        family = next(f for f in collection.selection.families if f.name == name)
        return self._rendering(
            name, lambda: Deferred.fromCoroutine(self._deflate(family, collection, key))
        )

    async def _deflate(self, family: Family, collection: Collection, key: Hashable) -> Segment:
        if family.original:
            segment = await self._sorted(family, collection, key)
        else:
            segment = await self._blockwise(family, collection.blocks(family), key, collection)
        self._segments[family.name] = segment
        return segment

    async def _sorted(self, family: Family, collection: Collection, key: Hashable) -> Segment:
        """One of the original's families: its samples sorted by their text, as the original.

        Sorting the rows by their label values (in the labels' written order) gives the same
        order, and lets blocks of the sorted rows be kept, when no value holds a character that
        sorts before the closing quote (none does in Kubernetes names); else the lines are made
        and sorted whole.  Sorted rows are kept, and follow what came and went.
        """
        width = len(family.labels) + 1
        source = list(collection.blocks(family))
        written = collection.written
        kept: SortedRows | None = written.get(("sorted", family.name))
        if kept is not None:
            chunks = kept.follow(source, lambda rows: _orderable(rows, family))
            if chunks is not None:
                return await self._blockwise(family, chunks, key, collection)
        rows = list(itertools.chain.from_iterable(source))
        if not any(map(width.__ne__, map(len, rows))):  # each object one row: its flat
            await self._turns.take()
            order = await self._order(family, rows)
            if order is not None:
                chunks = list(_sorted_blocks(order))
                written[("sorted", family.name)] = SortedRows(source, chunks, _sort_key(family))
                return await self._blockwise(family, chunks, key, collection)
        written.pop(("sorted", family.name), None)
        # Objects of several rows (a slice's devices): their rows are made anew for each sort,
        # so blocks of them could not be kept without keeping every row; the family is written
        # whole (it changes only when its objects do).
        if not rows:
            return Segment(key, (), 0, 0)
        compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW)
        parts, crc, size = [], 0, 0
        made = (row for flat in rows for row in expand(flat, width))
        for chunk in encode_family(family, made):
            parts.append(compressor.compress(chunk))
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
            await self._turns.take()
        parts.append(compressor.flush(zlib.Z_SYNC_FLUSH))
        return Segment(key, (b"".join(parts),), crc, size)

    async def _order(self, family: Family, rows: list[Row]) -> list[Row] | None:
        """*rows* sorted as their lines would be, or None if their values forbid it."""
        key = _sort_key(family)
        order: list[Row] = []
        for start in range(0, len(rows), SORTED_RUN):  # runs sorted in turns, then merged
            run = rows[start : start + SORTED_RUN]
            if not _orderable(run, family):  # looked at run by run too: 64,000 rows take 50 ms
                return None
            order.extend(sorted(run, key=key))
            await self._turns.take()
        order.sort(key=key)  # finds the runs and merges them: a few passes, not a full sort
        await self._turns.take()
        return order

    async def _deflated(self, block: Block, family: Family) -> Segment:
        """One block's lines, deflated on their own, with turns between their chunks.

        A block of a slice's device rows can be thousands of lines: 60 ms at once.
        """
        rows = rows_of(block, len(family.labels) + 1)
        compressor = zlib.compressobj(
            GZIP_LEVEL, zlib.DEFLATED, -BLOCK_WINDOW_BITS, BLOCK_MEMORY_LEVEL
        )
        parts, crc, size = [], 0, 0
        for chunk in exposition.chunks(exposition.lines(family, rows)):
            parts.append(compressor.compress(chunk))
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
            await self._turns.take()
        parts.append(compressor.flush(zlib.Z_SYNC_FLUSH))
        zeros = zlib.crc32(_ZEROS[:size]) if size <= len(_ZEROS) else -1
        return Segment(None, (b"".join(parts),), crc, size, zeros)

    async def _blockwise(
        self, family: Family, blocks: Iterable[Block], key: Hashable, collection: Collection
    ) -> Segment:
        """A family deflated block by block: a block written for an earlier collection is kept.

        What was written is kept with the collection's store (:attr:`Collection.written`), which
        drops it with the rows it holds when most objects of a list turn out new.
        """
        previous = collection.written.get(("blocks", family.name)) or WrittenBlocks()
        written = WrittenBlocks()
        parts: list[bytes] = []
        crc, size = 0, 0
        for block in blocks:
            found = previous.find(block)
            if not isinstance(found, Written):
                found = Written(block, await self._deflated(block, family), *found)
            written.keep(found)
            segment = found.segment
            if not parts:
                head = _deflated_text(exposition.header(family))
                parts.extend(head.data)
                crc, size = head.crc, head.size
            parts.extend(segment.data)
            if segment.zeros >= 0:  # crc32_combine, half done when the block was written
                crc = zlib.crc32(_ZEROS[: segment.size], crc) ^ segment.zeros ^ segment.crc
            else:
                crc = crc32_combine(crc, segment.crc, segment.size)
            size += segment.size
            # Blocks read again alike were compared in full: 64,000 devices' take a few hundred
            # milliseconds, which the reactor would wait for.
            await self._turns.take()
        collection.written[("blocks", family.name)] = written
        return Segment(key, tuple(parts), crc, size)

    def gzip(self, segments: list[Segment], tail: bytes) -> tuple[list[bytes], int]:
        """The pieces of a gzip body and its length: the segments, then *tail*."""
        made = (tuple(map(id, segments)), tail)
        if self._body is not None and self._body[0] == made and self._body[1] == segments:
            return self._body[2], self._body[3]  # the same body as the last scrape's
        crc, size = self._combined(segments)
        crc, size = zlib.crc32(tail, crc), size + len(tail)
        finish = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW)
        ending = finish.compress(tail) + finish.flush(zlib.Z_FINISH)
        trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
        pieces = [GZIP_HEADER, *(data for s in segments for data in s.data), ending, trailer]
        length = sum(map(len, pieces))
        self._body = (made, segments, pieces, length)
        return pieces, length

    def _combined(self, segments: list[Segment]) -> tuple[int, int]:
        keys = tuple(s.key for s in segments) + tuple(s.size for s in segments)
        if keys != self._joined[0]:
            crc, size = 0, 0
            for segment in segments:
                crc = crc32_combine(crc, segment.crc, segment.size)
                size += segment.size
            self._joined = (keys, crc, size)
        return self._joined[1], self._joined[2]


_BEFORE_QUOTE = re.compile('[\x00-"]')
"""Characters that sort before the quote closing a label value, or are escaped."""


def _orderable(rows: list[Row], family: Family) -> bool:
    """Whether sorting *rows* by their label values sorts their lines (see Renderer._sorted)."""
    width = len(family.labels) + 1
    try:
        if any(map(width.__ne__, map(len, rows))):
            return False
        return not _BEFORE_QUOTE.search("".join(itertools.chain.from_iterable(map(LABELS, rows))))
    except TypeError:  # a value not a string: the encoder says which
        return False


def _sort_key(family: Family) -> Callable[[Row], Any]:
    """The label values of a row in the order the original writes them (by label name)."""
    order = sorted(range(len(family.labels)), key=lambda index: str(family.labels[index]))
    return operator.itemgetter(*order)


def _sorted_blocks(rows: list[Row]) -> Iterator[Block]:
    """Sorted rows in blocks of BLOCK_SIZE (:class:`SortedRows` keeps them from then on)."""
    for start in range(0, len(rows), BLOCK_SIZE):
        yield tuple(rows[start : start + BLOCK_SIZE])


def _deflated_text(text: bytes) -> Segment:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW)
    data = compressor.compress(text) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return Segment(None, (data,), zlib.crc32(text), len(text))


def plain(segments: list[Segment], tail: bytes) -> tuple[Iterator[bytes], int]:
    """The pieces of a plain body (each segment inflated as it is written) and its length."""

    def pieces() -> Iterator[bytes]:
        for segment in segments:
            inflater = zlib.decompressobj(_RAW)
            for part in segment.data:
                compressed = memoryview(part)
                # A little compressed text at a time: zlib copies what it has not consumed yet,
                # so handing it a whole segment would copy megabytes for each piece, per scrape.
                for start in range(0, len(compressed), INFLATE_INPUT):
                    data: bytes | memoryview = compressed[start : start + INFLATE_INPUT]
                    while data:
                        piece = inflater.decompress(data, PIECE)
                        if piece:
                            yield piece
                        data = inflater.unconsumed_tail
        yield tail

    return pieces(), sum(s.size for s in segments) + len(tail)


# CRC-32 of two texts joined, from theirs (zlib's crc32_combine, which Python's zlib lacks).
#
# CRC(A+B) is CRC(B) plus CRC(A) multiplied by x^(8 len(B)) modulo the polynomial.  For a short
# B, zlib does the multiplication: zlib.crc32(data, start) is affine in start with a linear part
# that depends only on the length of data, so running it over len(B) zero bytes from CRC(A) and
# from 0 and adding the two gives the product (a few microseconds for a block of text).  For a
# long B, the power of x is made by squaring, in Python but in constant time.

_ZEROS = memoryview(bytes(64 * 1024))
_POLY = 0xEDB88320


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A+B from CRC(A), CRC(B) and the length of B."""
    if length2 <= len(_ZEROS):
        zeros = _ZEROS[:length2]
        return zlib.crc32(zeros, crc1) ^ zlib.crc32(zeros) ^ crc2
    shift, power, k = 1 << 31, length2, 3  # multiply by x^(8 * length2)
    while power:
        if power & 1:
            shift = _multiply(_X2N[k & 31], shift)
        power >>= 1
        k += 1
    return _multiply(shift, crc1) ^ crc2


def _multiply(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial (bit-reflected)."""
    product = 0
    mask = 1 << 31
    while True:
        if a & mask:
            product ^= b
            if not a & (mask - 1):
                return product
        mask >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1


def _powers() -> list[int]:
    table, power = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(power)
        power = _multiply(power, power)
    return table


_X2N = _powers()
"""x^(2^n) modulo the polynomial."""
