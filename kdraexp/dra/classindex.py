"""The listed DeviceClasses as the other kinds need them: what each costs, which devices it selects.

Classes are listed before slices and claims, so each device is matched against them while its
slice is read and each claim's results priced while the claim is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from kdraexp.dra.devicecel import CACHE_LIMIT, CompiledClass, DeviceFields, Matcher, union_paths

IMPLICIT_EXTENDED = "deviceclass.resource.kubernetes.io/"
"""Every class serves the extended resource of this prefix and its name."""


@attrs.frozen
class ClassEntry:
    """One DeviceClass: its name, selector expressions and hourly cost (None when it has none)."""

    name: str
    expressions: tuple[str, ...]
    cost: float | None
    extended_resource: str = ""
    """``spec.extendedResourceName``: pods may ask for the class's devices by that name."""


class ClassIndex:
    """The classes of one collection; empty when classes are not listed."""

    def __init__(self, entries: Iterable[ClassEntry] = (), matcher: Matcher | None = None) -> None:
        self.entries = {entry.name: entry for entry in entries}
        self.costs = {name: e.cost for name, e in self.entries.items() if e.cost is not None}
        self.extended = {f"{IMPLICIT_EXTENDED}{name}": name for name in self.entries}
        """Extended resource name -> the class serving it: its own name, and the implicit one."""
        self.extended.update(
            {e.extended_resource: e.name for e in self.entries.values() if e.extended_resource}
        )
        self._matcher = matcher
        self._compiled: list[tuple[ClassEntry, CompiledClass]] = []
        if matcher is not None:
            self._compiled = [(e, matcher.compile(e.expressions)) for e in self.entries.values()]
            matcher.forget(e.expressions for e in self.entries.values())
        self._paths = union_paths(compiled for _, compiled in self._compiled)
        self._by_projection: dict[Any, tuple[list[str], list[tuple[str, str]]]] = {}
        """Devices that read alike match alike: the answer for every class at once."""

    @property
    def matcher(self) -> Matcher | None:
        """What evaluates the selectors (None when classes are not listed)."""
        return self._matcher

    def matching(self, device: DeviceFields, errors: list[tuple[str, str]]) -> list[str]:
        """The names of the classes whose every selector *device* satisfies.

        Appends (class, reason) to *errors* for each class the match could not be decided with.
        """
        if self._matcher is None:
            return []
        if self._paths is None:
            found, failed = self._match(device)
        else:
            key = tuple([device.projection(path) for path in self._paths])
            known = self._by_projection.get(key)
            if known is None:
                if len(self._by_projection) >= CACHE_LIMIT:
                    self._by_projection.clear()
                known = self._by_projection[key] = self._match(device)
            found, failed = known
        errors.extend(failed)
        return found

    def _match(self, device: DeviceFields) -> tuple[list[str], list[tuple[str, str]]]:
        assert self._matcher is not None
        found, errors = [], []
        for entry, compiled in self._compiled:
            answer = self._matcher.matches(entry.expressions, compiled, device)
            if answer is True:
                found.append(entry.name)
            elif answer is not False:
                errors.append((entry.name, answer))
        return found, errors
