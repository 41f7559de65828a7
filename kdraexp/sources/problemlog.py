"""Values not read and undecided matches: counted and logged alike in list and watch mode.

Both modes count each problem each time they read the object that has it: a list reads every
object at every scrape, a watch reads an object when it applies it (its first list, a re-list,
an event, or a DeviceClass change that reads the slices again).  Each problem is logged once
while some object still has it, whichever mode found it.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Iterable, Mapping

from twisted.logger import Logger

from kdraexp.dra.problems import Problem
from kdraexp.telemetry.selfmetrics import CollectionStats

log = Logger()

Classes = Mapping[str, tuple[int, str]]
"""Per DeviceClass, the devices whose match with it could not be decided, and one reason."""


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
        self._held: dict[Hashable, dict[str, str]] = {}
        """Per source (an object, or a whole collection), its problems: key -> log line."""
        self._holders: collections.Counter[str] = collections.Counter()
        """Per problem key, the sources that hold it: logged again only after it went."""

    def read(self, source: Hashable, problems: Iterable[Problem], classes: Classes) -> None:
        """*source* was read and has these problems (and no others): count and log them."""
        now: dict[str, str] = {}
        for problem in problems:
            if problem.cut_short:
                self._stats.truncated(problem.resource, problem.field)
            else:
                self._stats.invalid(problem.resource, problem.field)
            now[problem.message] = problem.message
        for name, (devices, reason) in classes.items():
            self._stats.cel_errors(name, devices)
            now[f"DeviceClass {name}"] = f"DeviceClass {name}: {reason}"
        self._hold(source, now)

    def forget(self, source: Hashable) -> None:
        """*source* is gone: its problems no longer last through it."""
        self._hold(source, {})

    def sources(self) -> list[Hashable]:
        """The sources that hold problems now."""
        return list(self._held)

    def _hold(self, source: Hashable, now: dict[str, str]) -> None:
        before = self._held.pop(source, {})
        new = []
        for key, line in now.items():
            if key not in before:
                if not self._holders[key]:
                    new.append(line)
                self._holders[key] += 1
        for key in before.keys() - now.keys():
            self._holders[key] -= 1
            if not self._holders[key]:
                del self._holders[key]
        if now:
            self._held[source] = now
        for line in sorted(new):
            log.warn("{problem} (logged once while it lasts)", problem=line)
