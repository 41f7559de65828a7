"""Values not read and undecided matches: counted and logged alike in list and watch mode.

Both modes count each problem each time they read the object that has it: a list reads every
object at every scrape, a watch reads an object when it applies it (its first list, a re-list,
an event, or a DeviceClass change that reads the slices again).  Each problem is logged once
while some object still has it, whichever mode found it.

New problems of one kind and cause (a resource's field, or the DeviceClasses whose selectors
could not be decided) are logged in one line: how many, and the first few.  One odd field on
every one of 32,000 claims is one line, not 4.7 MB of them in one turn of the reactor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Hashable, Iterable, Iterator, Mapping

from twisted.logger import Logger

from kdraexp.dra.problems import Problem
from kdraexp.telemetry.selfmetrics import CollectionStats
from kdraexp.util.turns import Turns

log = Logger()

Classes = Mapping[str, tuple[int, str]]
"""Per DeviceClass, the devices whose match with it could not be decided, and one reason."""

EXAMPLES = 3
STEP = 256
"""Problems read between two looks at the clock by :meth:`ProblemLog.read_in_turns`."""
"""New problems of one kind named in its line; the others are counted."""
Kind = tuple[str, str]
"""(resource, field) of a problem: the new problems of one kind are logged in one line."""


def classes_of(errors: Iterable[tuple[str, str]]) -> dict[str, tuple[int, str]]:
    """Fold (class, reason) pairs, one per device, into :data:`Classes` (the first reason)."""
    folded: dict[str, tuple[int, str]] = {}
    for name, reason in errors:
        count, first = folded.get(name, (0, reason))
        folded[name] = (count + 1, first)
    return folded


class ProblemLog:
    """Counts what each read found, and logs a problem when nothing held it before."""

    def __init__(self, stats: CollectionStats) -> None:
        self._stats = stats
        self._held: dict[Hashable, dict[str, Problem]] = {}
        """Per source (an object, or a whole collection), its problems by key."""
        self._holders: dict[str, int] = {}
        """Per problem key, the sources that hold it: logged again only after it went."""
        self._new: dict[Kind, list[str]] | None = None
        """Within :meth:`batch`, the new problems of each kind, to be logged at its end."""

    def read(self, source: Hashable, problems: Iterable[Problem], classes: Classes) -> None:
        """*source* was read and has these problems (and no others): count and log them.

        A few microseconds a read: a watch's full list reads every object that has a problem.
        """
        for _ in self._read(source, problems, classes):
            pass

    async def read_in_turns(
        self, source: Hashable, problems: Iterable[Problem], classes: Classes, turns: Turns
    ) -> None:
        """:meth:`read`, giving the reactor its turns: a collection's problems may be many.

        32,000 claims without a creation time held the reactor 32 ms in one turn, at the end
        of the collection made at start, and 13 ms at every scrape after it.
        """
        for _ in self._read(source, problems, classes):
            await turns.take()

    def _read(
        self, source: Hashable, problems: Iterable[Problem], classes: Classes
    ) -> Iterator[None]:
        """:meth:`read`, pausing every :data:`STEP` problems."""
        now: dict[str, Problem] = {}
        counts: dict[Kind, int] = {}
        cut: dict[Kind, int] = {}
        """Values written cut short: counted apart from those left out."""
        for index, problem in enumerate(problems, 1):
            kind = (problem.resource, problem.field)
            counted = cut if problem.cut_short else counts
            counted[kind] = counted.get(kind, 0) + problem.count
            now[problem.message] = problem
            if not index % STEP:
                yield
        for (resource, field), count in counts.items():
            self._stats.invalid(resource, field, count)
        for (resource, field), count in cut.items():
            self._stats.truncated(resource, field, count)
        for name, (devices, reason) in classes.items():
            self._stats.cel_errors(name, devices)
            now[f"DeviceClass {name}"] = Problem(
                "deviceclasses", "selectors", f"DeviceClass {name}: {reason}"
            )
        if self._new is not None:
            yield from self._hold(source, now, self._new)
        else:
            new: dict[Kind, list[str]] = {}
            yield from self._hold(source, now, new)
            if new:
                _log_all(new)

    def forget(self, source: Hashable) -> None:
        """*source* is gone: its problems no longer last through it."""
        for _ in self._hold(source, {}, {}):
            pass

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Log the new problems of the reads within at its end, one line per kind."""
        if self._new is not None:  # within another batch: that one logs
            yield
            return
        self._new = {}
        try:
            yield
        finally:
            new, self._new = self._new, None
            _log_all(new)

    def sources(self) -> list[Hashable]:
        """The sources that hold problems now."""
        return list(self._held)

    def _hold(
        self, source: Hashable, now: dict[str, Problem], new: dict[Kind, list[str]]
    ) -> Iterator[None]:
        """Hold *now* for *source*; what no source held before goes to *new*, by kind.

        Pauses every :data:`STEP` problems; *source* holds what it held before until the end.
        """
        before = self._held.get(source) or {}
        holders = self._holders
        for index, (key, problem) in enumerate(now.items(), 1):
            if key not in before:
                held = holders.get(key, 0)
                if not held:
                    new.setdefault((problem.resource, problem.field), []).append(problem.message)
                holders[key] = held + 1
            if not index % STEP:
                yield
        for index, key in enumerate(before, 1):
            if key not in now:
                left = holders[key] - 1
                if left:
                    holders[key] = left
                else:
                    del holders[key]
            if not index % STEP:
                yield
        if now:
            self._held[source] = now
        else:
            self._held.pop(source, None)


def _log_all(new: dict[Kind, list[str]]) -> None:
    for kind, lines in sorted(new.items()):
        _log(kind, lines)


def _log(kind: Kind, lines: list[str]) -> None:
    """One line for the new problems of *kind*: the problem itself, or how many and the first."""
    if len(lines) == 1:
        log.warn("{problem} (logged once while it lasts)", problem=lines[0])
        return
    resource, field = kind
    more = len(lines) - EXAMPLES
    log.warn(
        "{count} problems with {resource} {field}, each logged once while it lasts: {problem}",
        count=len(lines),
        resource=resource,
        field=field,
        problem="; ".join(lines[:EXAMPLES]) + (f"; and {more} more" if more > 0 else ""),
    )
