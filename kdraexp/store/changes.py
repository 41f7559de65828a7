"""What changed between two collections: one record, one threshold, one contract.

The contract, which every cache that follows changes relies on: **an object that did not change
is the very same Python object** from one collection to the next.  An entry is kept while its
object's version is (store/collection), its flats with it (store/rows); a block of unchanged
flats is the same tuple (store/keptblocks), and a segment written for it the same bytes
(exposition/rendering).  So what changed is found by identity, in C, never by comparing values:
:func:`touched_between`.

A follower brings what it keeps up to the changes, unless many changed: past one in
:data:`REBUILT` it makes everything again, which then costs less (:func:`many`).  A kind's
change is recorded once, as a :class:`Change`, so its followers need not look for it again: a
watch knows what its events touched; a list compares once.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple, final

REBUILT = 8
"""Past one in this many changed, a follower makes everything again (cheaper than following)."""


def many(touched: int, total: int) -> bool:
    """Whether *touched* of *total* is so many that following costs more than starting again."""
    return touched * REBUILT > max(total, 1)


FORGOTTEN = 2
"""Past one in this many of a kind's objects new or changed while its list is read, what was
kept of the last list is forgotten at once (:meth:`.Store.start_again`)."""


def mostly_new(new: int, before: int) -> bool:
    """Whether *new* objects of a list read so far are most of the *before* last listed.

    Every follower makes everything again by then; what it kept of the last collection would
    only stay alive beside what the new one makes.  Not at one in :data:`REBUILT`: the rest of
    the list, mostly unchanged then, would all be decoded again.
    """
    return before > 0 and new * FORGOTTEN > before


@final
class Everything:
    """Every key changed, or nothing is known of what did: a follower makes everything again."""


EVERYTHING = Everything()
"""What a follower is told in place of the keys touched when it must make everything again."""


class Made(NamedTuple):
    """What a follower made of a source (a mapping, or versions), kept while the source is."""

    source: Any
    made: Any


class Change(NamedTuple):
    """What changed from one mapping to the next: the keys whose values are not the same."""

    before: Mapping[Any, Any]
    after: Mapping[Any, Any]
    touched: Collection[Any]


def change(
    before: Mapping[Any, Any], after: Mapping[Any, Any], touched: Collection[Any]
) -> Change | None:
    """The record of what changed; None where a follower starts again anyway (:func:`many`).

    Kept until the kind changes again, a record keeps *before* alive: after a change of every
    object, a whole collection's objects beside the new ones (at 64,000 devices, half the
    exporter's memory, while the cluster then stays calm).
    """
    if many(len(touched), len(after)):
        return None
    return Change(before, after, touched)


def touched_between(
    old: Mapping[Any, Any], new: Mapping[Any, Any], known: Change | None = None
) -> Collection[Any]:
    """The keys whose values are not the same objects in *old* and *new*.

    What *known* says, when it is about these two; else looked for, in C.
    """
    if known is not None and known.before is old and known.after is new:
        return known.touched
    differs = map(operator.is_not, map(old.get, new), new.values())
    touched = set(itertools.compress(new, differs))
    touched.update(old.keys() - new.keys())
    return touched
