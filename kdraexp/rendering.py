"""Each family's text, kept compressed and reused until the family's rows change.

A family's rows change only when a list it reads changes (:meth:`Collection.key`), so its text is
deflated once, as a segment of its own, and every later scrape, of this collection or the next
ones, sends the same bytes.  The gzip body is one gzip member: its header, every family's
segment (each a raw deflate stream ending with a sync flush, so they follow one another), the
scrape's own tail (the exporter's metrics) with the final block, and the trailer, whose CRC-32
is combined from the segments' without their text.  A plain body inflates the same segments as it
is written.

Nothing is written at once: a body is a sequence of pieces of at most :data:`PIECE` bytes, made as
the connection drains, so forty concurrent scrapes hold forty pieces, not forty bodies.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Hashable, Iterator

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from kdraexp.collection import Collection
from kdraexp.exposition import encode_family
from kdraexp.family import Family
from kdraexp.turns import Turns

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


@attrs.frozen
class Segment:
    """One family's text, deflated, flushed to a byte boundary but not finished."""

    key: Hashable
    data: bytes
    crc: int
    """CRC-32 of the text."""
    size: int
    """Length of the text."""


class Renderer:
    """Keeps every family's segment; renders a family again only when its key changed."""

    def __init__(self, clock: IReactorTime) -> None:
        self._turns = Turns(clock)
        """One budget for all rendering: thirty families of 10 ms each are 300 ms too."""
        self._segments: dict[str, Segment] = {}
        self._rendering: dict[str, list[Deferred[Segment]]] = {}
        """Per family being rendered, the scrapes waiting for it."""
        self._joined: tuple[tuple[Hashable, ...], int, int] = ((), 0, 0)
        """The keys of the last segments joined, their combined CRC and size."""

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
        waiter: Deferred[Segment] = Deferred()
        waiters = self._rendering.get(name)
        if waiters is not None:
            waiters.append(waiter)
            return waiter
        self._rendering[name] = [waiter]
        family = next(f for f in collection.selection.families if f.name == name)

        def finished(result: Segment | Failure) -> None:
            for each in self._rendering.pop(name):
                if isinstance(result, Failure):
                    each.errback(result)
                else:
                    each.callback(result)

        Deferred.fromCoroutine(self._deflate(family, collection, key)).addBoth(finished)
        return waiter

    async def _deflate(self, family: Family, collection: Collection, key: Hashable) -> Segment:
        rows = collection.rows(family)
        first = next(rows, None)
        if first is None:
            segment = Segment(key, b"", 0, 0)
        else:
            compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW)
            parts, crc, size = [], 0, 0
            for chunk in encode_family(family, itertools.chain((first,), rows)):
                parts.append(compressor.compress(chunk))
                crc, size = zlib.crc32(chunk, crc), size + len(chunk)
                await self._turns.take()
            parts.append(compressor.flush(zlib.Z_SYNC_FLUSH))
            segment = Segment(key, b"".join(parts), crc, size)
        self._segments[family.name] = segment
        return segment

    def gzip(self, segments: list[Segment], tail: bytes) -> tuple[list[bytes], int]:
        """The pieces of a gzip body and its length: the segments, then *tail*."""
        crc, size = self._combined(segments)
        crc, size = zlib.crc32(tail, crc), size + len(tail)
        finish = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _RAW)
        ending = finish.compress(tail) + finish.flush(zlib.Z_FINISH)
        trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
        pieces = [GZIP_HEADER, *(s.data for s in segments), ending, trailer]
        return pieces, sum(len(piece) for piece in pieces)

    def _combined(self, segments: list[Segment]) -> tuple[int, int]:
        keys = tuple(s.key for s in segments) + tuple(s.size for s in segments)
        if keys != self._joined[0]:
            crc, size = 0, 0
            for segment in segments:
                crc = crc32_combine(crc, segment.crc, segment.size)
                size += segment.size
            self._joined = (keys, crc, size)
        return self._joined[1], self._joined[2]


def plain(segments: list[Segment], tail: bytes) -> tuple[Iterator[bytes], int]:
    """The pieces of a plain body (each segment inflated as it is written) and its length."""

    def pieces() -> Iterator[bytes]:
        for segment in segments:
            inflater = zlib.decompressobj(_RAW)
            compressed = memoryview(segment.data)
            # A little compressed text at a time: zlib copies what it has not consumed yet, so
            # handing it a whole segment would copy megabytes for each piece, per scrape.
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

_POLY = 0xEDB88320


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


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """The CRC-32 of A+B from CRC(A), CRC(B) and the length of B."""
    shift, power, k = 1 << 31, length2, 3  # multiply by x^(8 * length2)
    while power:
        if power & 1:
            shift = _multiply(_X2N[k & 31], shift)
        power >>= 1
        k += 1
    return _multiply(shift, crc1) ^ crc2
