"""Claims' own selectors against the devices of their class: answers kept per slice.

A pending request's own selectors are evaluated on devices read again from their slices' kept
JSON (:mod:`.selectorread`), once for devices that read alike, and the answers kept per slice
while it is unchanged.  :mod:`.candidates` reads them for the devices a request matches.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from kdraexp.allocator.facts import SliceFacts
from kdraexp.allocator.index import Pool
from kdraexp.allocator.selectorread import SliceReader
from kdraexp.cel.device import SelectorView
from kdraexp.cel.matching import CompiledClass, Matcher, Path, union_paths

Answers = dict[str, bool | str]
"""Per device name that satisfies the selectors (True), or why that cannot be said."""
Paths = tuple[Path, ...] | None
"""What selectors read (None: the whole device)."""
BUDGET = 262144
"""Devices a collection evaluates claims' own selectors on, at most."""
KEPT = 32
"""Distinct (class, selectors) of pending requests whose answers are kept."""
BATCH = 64
"""Slices whose devices are evaluated together: the devices of 64 slices held at once."""
_NO_SLICES: Mapping[int, tuple[SliceFacts, Answers]] = MappingProxyType({})
"""The slices answered for selectors not asked yet (one read-only mapping for all)."""


class SelectorAnswers:
    """Claims' own selectors against devices: answers kept per (class, selectors) and slice.

    Lives as long as the exporter; a slice's answers go when the slice changes or goes.  A slice
    is read again from its JSON once for every pending (class, selectors) at a time: reading it
    costs more than evaluating it.  Bounded against claims that each pin one device by its own
    selector: at most :data:`BUDGET` devices are evaluated a collection (what is left is
    evaluated by the next ones, the answers so far kept) and the answers of :data:`KEPT`
    selectors are kept, the oldest dropped first.
    """

    def __init__(self, matcher: Matcher | None) -> None:
        self.matcher = matcher
        self._kept: dict[tuple[str, tuple[str, ...]], dict[int, tuple[SliceFacts, Answers]]] = {}
        self._pending: list[tuple[str, tuple[str, ...]]] = []
        """The (class, selectors) of pending requests judged together, slice by slice."""
        self._left = BUDGET
        self._compiled: dict[tuple[str, tuple[str, ...]], tuple[CompiledClass, Paths]] = {}
        """This collection's compiled selectors (the matcher's are behind its lock), and the
        paths they read."""
        self._plans: dict[
            tuple[tuple[str, tuple[str, ...]], ...],
            tuple[tuple[CompiledClass, ...], tuple[Paths, ...]],
        ] = {}
        """The same per set of (class, selectors) a slice is read for."""
        self._batch = _Batch()
        self._reader = SliceReader()

    def new_collection(self, pending: dict[tuple[str, tuple[str, ...]], int]) -> None:
        """A new collection, of requests with these own selectors: a new budget.

        *pending* gives, per (class, selectors), the devices of the class.  They are judged
        together only when the budget covers all of them; otherwise one after another, so that
        the budget gives some of them their answers now rather than none.  The answers of
        selectors no pending request has now are dropped.
        """
        self._left = BUDGET
        self._compiled = {}
        self._plans = {}
        self._batch = _Batch()
        for key in [key for key in self._kept if key not in pending]:
            del self._kept[key]
        together = len(pending) <= KEPT and sum(pending.values()) <= BUDGET
        self._pending = sorted(pending) if together else []

    def answers(
        self, deviceclass: str, selectors: tuple[str, ...], pools: list[Pool]
    ) -> dict[int, Answers] | None:
        """Per pool of *pools* (by ``id``), its devices of the class that match, or why not known.

        Each is True or why it cannot be said; the dicts are kept, not to be changed.  None when
        this collection's budget ran out first.
        """
        if self.matcher is None:
            return {}
        key = (deviceclass, selectors)
        old = self._kept.pop(key, {})
        kept: dict[int, tuple[SliceFacts, Answers]] = {}
        found: dict[int, Answers] = {}
        complete = True
        read: list[tuple[Pool, Answers]] = []
        for pool in pools:
            for facts in pool.current:
                known = old.get(id(facts))
                if known is None or known[0] is not facts:
                    if self._left <= 0:
                        complete = False
                        continue
                    known = (facts, self._judge(facts, key))
                    if self._batch.slices >= BATCH:
                        self._batch.evaluate(self.matcher)
                kept[id(facts)] = known
                read.append((pool, known[1]))
        self._batch.evaluate(self.matcher)
        merged: set[int] = set()
        for pool, answers in read:
            have = found.setdefault(id(pool), answers)
            if have is not answers:  # a pool of several slices: the first slice's device wins
                if id(pool) not in merged:
                    merged.add(id(pool))
                    have = found[id(pool)] = dict(have)
                for name, answer in answers.items():
                    have.setdefault(name, answer)
        while len(self._kept) >= KEPT:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = kept
        return found if complete else None

    def _judge(self, facts: SliceFacts, asked: tuple[str, tuple[str, ...]]) -> Answers:
        """The slice's devices of the class that match (True) or cannot be judged (why).

        The answers for the other pending selectors not yet known on this slice are made in the
        same reading, and kept for when they are asked for.  They are filled in when the batch
        the slice joined is evaluated.  The slice's facts have a device for each of its JSON's,
        in the same order: devices are found in what is read again by their place.
        """
        kept, mine, devices = self._kept, id(facts), facts.devices
        keys = [asked]
        for key in self._pending:
            if key != asked:
                known = kept.get(key, _NO_SLICES).get(mine)
                if known is None or known[0] is not facts:
                    keys.append(key)
        places: dict[str, list[int]] = {}  # where the class's devices are, as in its JSON
        made: dict[tuple[str, tuple[str, ...]], Answers] = {}
        for key in keys:
            deviceclass = key[0]
            if deviceclass not in places:
                places[deviceclass] = [
                    at for at, device in enumerate(devices) if deviceclass in device.classes
                ]
            made[key] = {}
        if not all(places.values()):  # a class selecting none of the slice's devices
            keys = [key for key in keys if places[key[0]]]
        if facts.source is None:  # facts made without a list (every listed slice keeps it)
            made = {
                key: dict.fromkeys(
                    [devices[at].name for at in places[key[0]]], "the slice's JSON was not kept"
                )
                for key in keys
            }
        elif keys:
            selectors, asked_paths = self._plan(tuple(keys))
            read = self._reader.read(facts.source, facts.driver, asked_paths)
            names = [device.name for device in devices]
            whole, batch = len(devices), self._batch
            for key, one, reads in zip(keys, selectors, read.readers, strict=True):
                at = places[key[0]]
                if len(at) == whole:  # the class selects every device: the usual slice
                    of_key, named = read.devices, names
                else:
                    of_key, named = [read.devices[i] for i in at], [names[i] for i in at]
                batch.add(key, one, of_key, named, reads, read.view, made[key])
            batch.slices += 1
        for key in keys:
            self._left -= len(places[key[0]])
            if key != asked:
                kept.setdefault(key, {})[mine] = (facts, made[key])
        return made.get(asked, {})

    def _plan(
        self, keys: tuple[tuple[str, tuple[str, ...]], ...]
    ) -> tuple[tuple[CompiledClass, ...], tuple[Paths, ...]]:
        """The compiled selectors of *keys*, and the paths each reads: compiled once."""
        found = self._plans.get(keys)
        if found is None:
            assert self.matcher is not None
            compiled = self._compiled
            new = [key for key in keys if key not in compiled]
            if new:
                made = self.matcher.compile_all([key[1] for key in new])
                compiled.update(
                    (key, (one, union_paths([one]))) for key, one in zip(new, made, strict=True)
                )
            found = self._plans[keys] = (
                tuple([compiled[key][0] for key in keys]),
                tuple([compiled[key][1] for key in keys]),
            )
        return found


class _Batch:
    """Slices read again for claims' own selectors, evaluated together.

    Devices that read alike (equal values where the selectors read) are evaluated once over the
    batch's slices: a cluster's GPUs repeat a few PCI addresses and one driver version, and each
    evaluation asked costs more than reading the device.  A view is made of the first device
    that reads one way only, the one evaluated.  Slices whose devices read alike in the same
    order (a node's GPUs, node after node) share where their answers come from.
    """

    def __init__(self) -> None:
        self.slices = 0
        self._pairs: list[tuple[CompiledClass, SelectorView]] = []
        self._alike: dict[tuple[str, tuple[str, ...]], dict[Hashable, int]] = {}
        """Per (class, selectors), what a device reads -> its place in the pairs."""
        self._orders: dict[tuple[str, tuple[str, ...]], dict[tuple[Hashable, ...], list[int]]] = {}
        """Per (class, selectors), what a slice's devices read, in order -> their places."""
        self._into: list[tuple[Answers, list[str], list[int]]] = []
        """Where answers go: a slice's answers, its devices' names and each one's place."""

    def add(
        self,
        key: tuple[str, tuple[str, ...]],
        compiled: CompiledClass,
        devices: Sequence[Any],
        names: list[str],
        reads: Callable[[Sequence[Any]], list[Hashable]],
        view: Callable[[Any], SelectorView],
        answers: Answers,
    ) -> None:
        """Evaluate *compiled* on *devices*, of one slice, with the batch, for *answers*.

        *names* are the devices' names, *reads* says what devices read, *view* makes one what
        selectors are evaluated on.
        """
        read = tuple(reads(devices))
        orders = self._orders.setdefault(key, {})
        places = orders.get(read)
        if places is None:
            alike, pairs, places = self._alike.setdefault(key, {}), self._pairs, []
            for device, one in zip(devices, read, strict=True):
                place = alike.get(one)
                if place is None:
                    place = alike[one] = len(pairs)
                    pairs.append((compiled, view(device)))
                places.append(place)
            orders[read] = places
        self._into.append((answers, names, places))

    def evaluate(self, matcher: Matcher | None) -> None:
        """Fill in every answer asked for since the last time, and start again."""
        pairs, into = self._pairs, self._into
        self.slices, self._pairs, self._alike, self._orders, self._into = 0, [], {}, {}, []
        if pairs and matcher is not None:
            found = matcher.match_all(pairs, budgeted=False)
            values: dict[int, list[Any]] = {}  # slices reading alike share their places
            for answers, names, places in into:
                of_places = values.get(id(places))
                if of_places is None:
                    of_places = values[id(places)] = [found[place] for place in places]
                answers.update(zip(names, of_places, strict=True))
