"""The listed DeviceClasses as the other kinds need them: what each costs, which devices it selects.

Classes are listed before slices and claims, so each device is matched against them while its
slice is read and each claim's results priced while the claim is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from kdraexp.cel.matching import (
    ANSWERS,
    EVALUATIONS,
    PER_DEVICE,
    UNMATCHED,
    CompiledClass,
    DeviceFields,
    Matcher,
    TooManyEvaluations,
    transient,
    union_paths,
)

IMPLICIT_EXTENDED = "deviceclass.resource.kubernetes.io/"
"""Every class serves the extended resource of this prefix and its name."""
PAIRS = 65536
"""(class, device) pairs matched at once at most: what one slice's match holds in memory."""
MANY_CLASSES = 32
"""Classes past which matching is costly from the start (32 x 128 devices of a slice)."""
UNMATCHED_LISTED = 16
"""Classes left unmatched that an object read without them names (the costliest first)."""
KEPT_NAMES = 262144
"""Class names kept in the answers per projection, over all devices; when full, it starts over
(a thousand classes over a thousand distinct devices would keep a million)."""


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
        self._made: tuple[list[tuple[ClassEntry, CompiledClass]], Any] | None = None
        """The classes compiled and the paths they read: made when a device is first matched
        (in a list's thread when matching is costly, not on the reactor)."""
        if matcher is not None:
            matcher.forget(e.expressions for e in self.entries.values())
        self._by_projection: dict[Any, tuple[list[str], list[tuple[str, str]]]] = {}
        """Devices that read alike match alike: the answer for every class at once."""
        self._kept = 0
        self._prepared: dict[int, tuple[list[str], list[tuple[str, str]]]] = {}
        """For devices read whole, the answers :meth:`prepare` found for the slice at hand."""
        self._prepared_keys: dict[int, tuple[DeviceFields, Any]] = {}
        """What :meth:`prepare` read of the slice at hand's devices, until each is matched (the
        device kept with its key, so that no other device takes its identity meanwhile)."""
        self._unmatched: dict[str, str] = {}
        """The classes left unmatched in the matcher's collection :attr:`_unmatched_in`, and
        why: the costliest, when its evaluations ran out."""
        self._unmatched_in = -1
        self._live_made: tuple[int, list[tuple[ClassEntry, CompiledClass]]] | None = None
        self._asks: bool | None = None
        """Whether matching may ask the evaluation process, once every class is compiled."""

    @property
    def _compiled(self) -> list[tuple[ClassEntry, CompiledClass]]:
        return self._compile()[0]

    @property
    def _paths(self) -> Any:
        return self._compile()[1]

    def _compile(self) -> tuple[list[tuple[ClassEntry, CompiledClass]], Any]:
        if self._made is None:
            compiled: list[tuple[ClassEntry, CompiledClass]] = []
            if self._matcher is not None:
                classes = list(self.entries.values())
                made = self._matcher.compile_all([e.expressions for e in classes])
                compiled = list(zip(classes, made, strict=True))
            self._made = (compiled, union_paths(one for _, one in compiled))
        return self._made

    @property
    def costly(self) -> bool:
        """Whether matching devices is costly.

        It was of late (see ``Matcher.costly``), or the classes are so many that each slice's
        devices make thousands of matches, or matching may ask the evaluation process (see
        :meth:`_asks_process`): one evaluation may take its whole CPU budget, and a slice's
        devices make hundreds of them.
        """
        if self._matcher is None:
            return False
        return self._matcher.costly or len(self.entries) > MANY_CLASSES or self._asks_process()

    def _asks_process(self) -> bool:
        """Whether a class has a selector only the evaluation process answers, or is not compiled.

        Compiling reads every expression and asks the process.  Looks in what the matcher
        compiled without waiting for it (a list abandoned by its scrape may still be matching
        in a thread).
        """
        if self._asks is None:
            assert self._matcher is not None
            found = [self._matcher.compiled(e.expressions) for e in self.entries.values()]
            if any(one is None for one in found):
                return True
            self._asks = not all(one is not None and one.evaluated_here for one in found)
        return self._asks

    @property
    def matcher(self) -> Matcher | None:
        """What evaluates the selectors (None when classes are not listed)."""
        return self._matcher

    def prepare(self, devices: Sequence[DeviceFields]) -> None:
        """Match a slice's devices at once: one request to the evaluation process at most.

        :meth:`matching` then answers for these devices from what was found.

        Where the matches would not fit what is left of the collection's evaluations, the
        costliest classes are left unmatched (see :meth:`_match_all`).
        """
        self._prepared.clear()
        self._prepared_keys.clear()
        if self._matcher is None or not self._compiled:
            return
        self._matcher.devices_read(len(devices))
        pending: dict[Any, DeviceFields] = {}
        keys_of = self._prepared_keys
        for device in devices:
            key = self._key(device)
            keys_of[id(device)] = (device, key)
            if key is None or key not in self._by_projection:
                pending.setdefault(key if key is not None else id(device), device)
        if not pending:
            return
        keys = list(pending)
        fit = (self._matcher.left + ANSWERS) // len(keys)
        """The selectors this slice's distinct devices can be matched with, were nothing cached."""
        evaluated = {e.expressions for e, c in self._live() if not c.evaluated_here}
        beyond = len(evaluated) - fit
        if beyond > 0:  # more than any cache could spare: the costliest go now
            self._leave_out({}, beyond)
        start = 0
        while start < len(keys):
            live = self._live()
            step = max(1, PAIRS // max(1, len(live)))  # a thousand classes: 65 devices at a time
            some = keys[start : start + step]
            start += step
            requests = [(e.name, c, pending[key]) for key in some for e, c in live]
            answers = iter(self._match_all(requests))
            for key in some:
                found = self._sort([(entry.name, next(answers)) for entry, _ in live])
                if self._paths is None:
                    self._prepared[key] = found
                else:
                    self._keep(key, found)

    def matching(self, device: DeviceFields, errors: list[tuple[str, str]]) -> list[str]:
        """The names of the classes whose every selector *device* satisfies.

        Appends (class, reason) to *errors* for each class the match could not be decided with.
        Those left unmatched in this collection are not among them: a thousand of them over
        every device would be millions (see :meth:`unmatched`).
        """
        if self._matcher is None:
            return []
        read = self._prepared_keys.pop(id(device), None)  # a device is matched once
        key = read[1] if read is not None and read[0] is device else self._key(device)
        known = self._prepared.get(id(device)) if key is None else self._by_projection.get(key)
        if known is None:
            live = self._live()
            answers = self._match_all([(e.name, compiled, device) for e, compiled in live])
            known = self._sort([(e.name, a) for (e, _), a in zip(live, answers, strict=True)])
            if key is not None:
                self._keep(key, known)
        found, failed = known
        if failed:
            errors.extend(e for e in failed if not e[1].startswith(UNMATCHED))
        return found

    def unmatched(self) -> dict[str, str]:
        """The classes left unmatched in this collection so far, and why (the costliest first).

        A device matched now cannot be said to satisfy them, nor not to.
        """
        if self._matcher is None:
            return {}
        return self._left_out()

    def unmatched_errors(self) -> list[tuple[str, str]]:
        """(class, reason) for the classes left unmatched, for an object read without them.

        At most :data:`UNMATCHED_LISTED` of them, the costliest; the last says how many more.
        """
        unmatched = self.unmatched()
        listed = list(itertools.islice(unmatched.items(), UNMATCHED_LISTED))
        if len(unmatched) > len(listed):
            name, reason = listed[-1]
            more = len(unmatched) - len(listed)
            listed[-1] = (name, f"{reason} (and {more} more classes left unmatched, not listed)")
        return listed

    def _match_all(
        self, requests: list[tuple[str, CompiledClass, DeviceFields]]
    ) -> list[bool | str]:
        """Each (class name, its selectors, device)'s answer; a class left unmatched answers why.

        Where the collection's evaluations would run out, the class that asked for the most of
        them (this collection and now) is left unmatched until the collection ends, and the
        rest asked again: a costly selector costs its class, not the list.
        """
        assert self._matcher is not None
        unmatched = self._left_out()
        while True:
            asked = [i for i, (name, _, _) in enumerate(requests) if name not in unmatched]
            try:
                found = self._matcher.match_all([requests[i][1:] for i in asked])
            except TooManyEvaluations as error:
                self._leave_out(error.wanted)
                continue
            answers: list[bool | str] = [unmatched.get(name, "") for name, _, _ in requests]
            for i, answer in zip(asked, found, strict=True):
                answers[i] = answer
            return answers

    def _live(self) -> list[tuple[ClassEntry, CompiledClass]]:
        """The classes still matched in this collection (all but those left unmatched)."""
        unmatched = self._left_out()
        if not unmatched:
            return self._compiled
        if self._live_made is None or self._live_made[0] != len(unmatched):
            live = [(e, c) for e, c in self._compiled if e.name not in unmatched]
            self._live_made = (len(unmatched), live)
        return self._live_made[1]

    def _left_out(self) -> dict[str, str]:
        """The classes left unmatched in the matcher's collection (none in a new one).

        What was kept of a collection that left classes unmatched is dropped with it (in watch
        mode, where an object is a collection, the index outlives it).
        """
        assert self._matcher is not None
        if self._unmatched_in != self._matcher.collection:
            if self._unmatched:
                self._by_projection.clear()
                self._kept = 0
            self._unmatched, self._unmatched_in = {}, self._matcher.collection
            self._live_made = None
        return self._unmatched

    def _leave_out(self, wanted: dict[str, int], selectors: int = 0) -> None:
        """Leave unmatched the classes whose selectors asked for the most evaluations.

        Those asked for this collection, and *wanted* now.  Classes with the same selectors ask
        for the same evaluations, so they go together; classes that asked the process nothing
        and would not (:attr:`.CompiledClass.evaluated_here`) never go.  As many selectors go
        as give back what *wanted* asks for beyond what is left, or *selectors* of them.
        """
        assert self._matcher is not None
        spent, left = self._matcher.spent, self._matcher.left
        unmatched = self._left_out()
        names: dict[tuple[str, ...], list[str]] = {}
        costs: dict[tuple[str, ...], tuple[int, int]] = {}
        """Per selectors of classes still matched: (evaluations asked for in the collection, of
        them now)."""
        for entry, compiled in self._compiled:
            if entry.name in unmatched:
                continue
            now = sum(wanted.get(e, 0) for e in entry.expressions)
            cost = sum(spent.get(e, 0) for e in entry.expressions) + now
            if cost or not compiled.evaluated_here:
                names.setdefault(entry.expressions, []).append(entry.name)
                costs[entry.expressions] = (cost, now)
        assert costs, "what ran out was asked for by a class still matched"
        beyond = sum(wanted.values()) - left
        for key in sorted(costs, key=lambda key: (costs[key][0], max(names[key])), reverse=True):
            for name in names[key]:
                unmatched[name] = (
                    f"{UNMATCHED}its selectors need more evaluations than were left of a "
                    f"collection's {EVALUATIONS} and {PER_DEVICE} per device ({costs[key][0]} "
                    f"asked for, among the most of {len(self.entries)} classes); matched again "
                    "when its slices or the classes change"
                )
            beyond -= costs[key][1]
            selectors -= 1
            if beyond <= 0 and selectors <= 0:
                return

    def _key(self, device: DeviceFields) -> Any:
        if self._paths is None:
            return None
        return tuple([device.projection(path) for path in self._paths])

    @staticmethod
    def _sort(answers: list[tuple[str, bool | str]]) -> tuple[list[str], list[tuple[str, str]]]:
        found = [name for name, answer in answers if answer is True]
        failed = [(name, a) for name, a in answers if isinstance(a, str)]
        return found, failed

    def _keep(self, key: Any, known: tuple[list[str], list[tuple[str, str]]]) -> None:
        if any(transient(error) for _, error in known[1]):
            return  # asked again next time
        size = len(known[0]) + len(known[1]) + 1
        if self._kept + size > KEPT_NAMES:
            self._by_projection.clear()
            self._kept = 0
        self._by_projection[key] = known
        self._kept += size
