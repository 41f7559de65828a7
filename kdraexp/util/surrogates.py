r"""JSON whose strings hold lone UTF-16 surrogates (``"\\ud800"``), read as Go reads it.

msgspec refuses such a document whole, and with it every object of a list's page; Go's
``encoding/json`` (the API server's, kubectl's) reads each lone surrogate as U+FFFD.  Mended
alike, escape for escape of the same length, a document keeps every other byte where it was, so
what was mended is found again object by object (:func:`marked`): it costs those objects'
values, counted, not the page.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

import attrs
import msgspec

_ESCAPE = re.compile(
    rb"\\(?:\\|u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|u[dD][c-fC-F][0-9a-fA-F]{2})"
)
"""An escaped backslash, a surrogate pair, or a lone surrogate: scanned in that order, so the
backslash of ``\\\\ud800`` (text, not an escape) is never taken for one."""
_LONE = 6
"""The length of a lone surrogate's escape (a pair's is 12, a backslash's 2)."""
REPLACEMENT = rb"\ufffd"


@attrs.frozen
class Mended:
    """One object's JSON in which *count* lone surrogates were read as U+FFFD."""

    raw: msgspec.Raw
    count: int

    def __len__(self) -> int:
        return len(self.raw)


def mend(data: bytes | bytearray) -> tuple[bytes, list[int]]:
    """*data* with each lone surrogate's escape replaced by U+FFFD's, and where each was."""
    found: list[int] = []

    def one(match: re.Match[bytes]) -> bytes:
        text = match.group()
        if len(text) != _LONE:
            return text
        found.append(match.start())
        return REPLACEMENT

    return _ESCAPE.sub(one, data), found


def marked(
    document: bytes, items: Sequence[msgspec.Raw], found: Sequence[int]
) -> list[msgspec.Raw | Mended]:
    """*items*, the objects of the mended *document* in its order, those *found* holds marked.

    Each is found in turn after the one before (nothing but commas and spaces between them).
    """
    marks: list[msgspec.Raw | Mended] = []
    position = 0
    for raw in items:
        start = document.find(memoryview(raw), position)
        if start < 0:  # not of this document: nothing known of it
            marks.append(raw)
            continue
        position = start + len(raw)
        count = bisect.bisect_left(found, position) - bisect.bisect_left(found, start)
        marks.append(Mended(raw, count) if count else raw)
    return marks


def unmended(item: msgspec.Raw | Mended) -> tuple[msgspec.Raw, int]:
    """An object's JSON, and how many lone surrogates it held."""
    if isinstance(item, Mended):
        return item.raw, item.count
    return item, 0
