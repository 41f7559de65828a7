"""Why a pending claim's request cannot be allocated, judged as the allocator judges it.

The scheduler gives every cause one sentence ("cannot allocate all claims"); this names it.  Each
request (or ``firstAvailable`` alternative) is judged alone against what the allocator sees: the
devices its class and its own selectors match (current generations only), their pools' states,
their taints against its tolerations, what is allocated, and the counters.  The first reason that
applies is the one given (the metrics reference lists them in order); ``feasible`` says the
request alone could be allocated now, so the claim waits for something else.

Equal requests get one judgement per collection: claims made from one template cost one.  A
request's own selectors are evaluated on devices read again from their slices' kept JSON, once
for devices that read alike, the answers kept per slice while it is unchanged.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import attrs

from kdraexp.allocator.headroom import allocatable, capacity, most, shares
from kdraexp.allocator.index import (
    NOTHING,
    USABLE,
    ClusterIndex,
    DeviceFacts,
    Pool,
    RequestFacts,
    SliceFacts,
    blocked,
    take,
)
from kdraexp.allocator.selectorread import SliceReader
from kdraexp.cel.device import SelectorView
from kdraexp.cel.matching import CompiledClass, Matcher, Path, union_paths
from kdraexp.dra import gated
from kdraexp.dra.listing import RESOURCE_CLAIMS

REASONS = (
    "class_not_found",
    "selector_error",
    "no_matching_device",
    "pool_unusable",
    "exceeds_capacity",
    "tainted",
    "in_use",
    "insufficient",
    "not_together",
    "feasible",
)
"""Every reason, in the order they are tried."""

Candidate = tuple[Pool, DeviceFacts]
Answers = dict[str, bool | str]
Paths = tuple[Path, ...] | None
"""What selectors read (None: the whole device)."""
"""Per device name that satisfies the selectors (True), or why that cannot be said."""
BUDGET = 262144
"""Devices a collection evaluates claims' own selectors on, at most."""
KEPT = 32
"""Distinct (class, selectors) of pending requests whose answers are kept."""
BATCH = 64
"""Slices whose devices are evaluated together: the devices of 64 slices held at once."""
_NONE: Answers = {}
_NO_SLICES: dict[int, tuple[SliceFacts, Answers]] = {}
NOT_JUDGED = "not_judged"
"""No reason yet: the collection's budget for claims' own selectors ran out first."""


@attrs.frozen
class Judgement:
    """A request's reason, and how many devices it matches in each device state."""

    reason: str
    matching: tuple[tuple[str, int], ...] = ()
    error: str = ""
    """Why one of the request's own selectors could not be evaluated, if one could not."""


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


def judge(index: ClusterIndex, request: RequestFacts) -> Judgement:
    """The request's reason (kept per index: equal requests are judged once)."""
    known = index.judged.get(request)
    if known is None:
        known = index.judged[request] = _judge(index, request)
    return known


@attrs.frozen
class Summary:
    """What a plain request reads of one pool, per class: kept until the pool's use changes.

    A plain request names a class and a count and nothing else (no selectors, tolerations,
    capacity or adminAccess): most pending claims, made from templates, are plain.
    """

    states: dict[str, dict[str, int]]
    """Per class, its devices by state (each name once)."""
    open_tainted: dict[str, int]
    """Per class, devices neither allocated nor blocked, but tainted."""
    fits: dict[str, dict[str, float]]
    """Per class and node, how many one-device requests first fit places."""
    shareable: frozenset[str]
    """The classes selecting a device that allows multiple allocations here."""
    most: dict[str, dict[str, float]]
    """Per class and node, the most devices that fit together with nothing in use."""
    counted: frozenset[str] = frozenset()
    """The classes selecting a device that consumes shared counters here."""

    @property
    def classes(self) -> set[str]:
        """The classes that select a device of the pool."""
        return {*self.states, *self.fits}


@attrs.define
class Totals:
    """One class's pools' summaries added up, kept while a few pools' use changes.

    A plain request reads every pool of its class: 8,000 of them, each time a claim changed.
    """

    deviceclass: str
    parts: dict[tuple[str, str], tuple[Summary, bool]] = attrs.Factory(dict)
    """Each pool's summary as added, and whether the pool was usable."""
    states: dict[str, int] = attrs.Factory(dict)
    shareable: int = 0
    """Pools where a device of the class allows multiple allocations."""
    counted: int = 0
    """Pools where a device of the class consumes shared counters."""
    usable: int = 0
    open_tainted: int = 0
    """Usable pools where a device of the class is open but tainted."""
    fits: dict[str, float] = attrs.Factory(dict)
    """Per node, what first fit places in the usable pools."""
    everywhere: float = 0.0
    """What first fit places on devices not bound to a node."""
    most: dict[str, float] = attrs.Factory(dict)
    """Per node, the most devices of the usable pools that fit together with nothing in use."""
    most_everywhere: float = 0.0
    """The same, of devices not bound to a node."""

    def add(self, key: tuple[str, str], made: Summary, usable: bool, by: int = 1) -> None:
        """Add (*by* 1) or take out (-1) one pool's summary."""
        deviceclass = self.deviceclass
        for state, count in made.states.get(deviceclass, {}).items():
            self.states[state] = self.states.get(state, 0) + by * count
        self.shareable += by * (deviceclass in made.shareable)
        self.counted += by * (deviceclass in made.counted)
        if usable:
            self.usable += by
            self.open_tainted += by * bool(made.open_tainted.get(deviceclass))
            for node, fit in made.fits.get(deviceclass, {}).items():
                if node:
                    self.fits[node] = self.fits.get(node, 0.0) + by * fit
                else:
                    self.everywhere += by * fit
            for node, fit in made.most.get(deviceclass, {}).items():
                if node:
                    self.most[node] = self.most.get(node, 0.0) + by * fit
                else:
                    self.most_everywhere += by * fit
        if by > 0:
            self.parts[key] = (made, usable)
        else:
            del self.parts[key]


def totals(index: ClusterIndex, deviceclass: str) -> Totals:
    """The class's totals, brought up to the pools whose use changed since."""
    pools = index.pools_by_class.get(deviceclass, {})
    made: Totals | None = index.totals.get(deviceclass)
    stale = index.stale.pop(deviceclass, set())
    if made is None:
        made = index.totals[deviceclass] = Totals(deviceclass)
        stale = set(pools)
    for key in stale:
        if key in made.parts:
            made.add(key, *made.parts[key], by=-1)
        pool = pools.get(key)
        if pool is not None:
            made.add(key, summary(index, pool), pool.state == USABLE)
    return made


def summary(index: ClusterIndex, pool: Pool) -> Summary:
    """The pool's summary, made again once its use changed."""
    key = (pool.driver, pool.name)
    made: Summary | None = index.summaries.get(key)
    if made is None:
        states: dict[str, dict[str, int]] = {}
        open_tainted: dict[str, int] = {}
        shareable: set[str] = set()
        counted: set[str] = set()
        seen: set[str] = set()
        for device, state in zip(pool.devices, index.states(pool), strict=True):
            if device.name in seen or not device.classes:
                continue
            seen.add(device.name)
            tainted_open = state == "tainted" and not blocked(device, pool)
            for deviceclass in device.classes:
                counts = states.setdefault(deviceclass, {})
                counts[state] = counts.get(state, 0) + 1
                if tainted_open:
                    open_tainted[deviceclass] = open_tainted.get(deviceclass, 0) + 1
                if device.capacities is not None:
                    shareable.add(deviceclass)
                if device.consumes:
                    counted.add(deviceclass)
        fits: dict[str, dict[str, float]] = {}
        for node, deviceclass, count in allocatable(index, pool):
            fits.setdefault(deviceclass, {})[node] = count
        together: dict[str, dict[str, float]] = {}
        for node, deviceclass, count in capacity(pool):
            together.setdefault(deviceclass, {})[node] = count
        made = index.summaries[key] = Summary(
            states, open_tainted, fits, frozenset(shareable), together, frozenset(counted)
        )
    return made


def _plain(index: ClusterIndex, request: RequestFacts) -> Judgement | None:
    """A plain request judged from the pools' summaries; None when it is not plain.

    Also None when one-device claims placed one after another do not reach its count and the
    class selects devices consuming shared counters: the allocator searches for one claim's
    devices, and so does the judgement in full.  Without counters, every free device can be
    taken with the others, and one after another is the search's answer.
    """
    if request.selectors or request.tolerations or request.admin or request.capacity:
        return None
    if request.all:
        return None
    made = totals(index, request.deviceclass)
    if made.shareable:
        return None
    matching = tuple(sorted((state, count) for state, count in made.states.items() if count))
    if request.deviceclass in index.unsure:
        return Judgement("selector_error", matching)
    if not made.parts:
        return Judgement("no_matching_device", matching)
    if not made.usable:
        return Judgement("pool_unusable", matching)
    ever = made.most_everywhere
    if max((n + ever for n in made.most.values()), default=ever) < request.count:
        return Judgement("exceeds_capacity", matching)
    if not made.states.get("available"):
        return Judgement("tainted" if made.open_tainted else "in_use", matching)
    everywhere = made.everywhere
    best = max((count + everywhere for count in made.fits.values()), default=everywhere)
    if best >= request.count:
        return Judgement("feasible", matching)
    if made.counted:
        return None  # one after another is not the allocator's search where counters bind
    return Judgement("insufficient", matching)


def _judge(index: ClusterIndex, request: RequestFacts) -> Judgement:
    if request.deviceclass not in index.classes:
        return Judgement("class_not_found")
    plain = _plain(index, request)
    if plain is not None:
        return plain
    found = _matching(index, request)
    if found is None:
        return Judgement(NOT_JUDGED)
    candidates, own = found
    error = request.deviceclass in index.unsure
    states: dict[str, int] = {}
    for pool, device in candidates:
        state = index.state(pool, device)
        states[state] = states.get(state, 0) + 1
    matching = tuple(sorted(states.items()))
    if error or own:
        return Judgement("selector_error", matching, own)
    if not candidates:
        return Judgement("no_matching_device", matching)
    usable = [candidate for candidate in candidates if candidate[0].state == USABLE]
    if not usable:
        return Judgement("pool_unusable", matching)
    if not request.all and not _reaches(usable, request.count):
        return Judgement("exceeds_capacity", matching)
    open_, free = _open(index, request, usable)
    if not free:
        return Judgement("tainted" if open_ else "in_use", matching)
    if request.all:
        fits = len(usable) == len(candidates) and _all_fit(index, request, candidates, free)
    else:
        fits = any(n >= request.count for n in _per_node(index, request, free).values())
        if not fits:  # first fit is not the allocator's search: search, within bounds
            index.judged[("free", request)] = free
            fits = _together(index, (request,), unknown=False)
    return Judgement("feasible" if fits else "insufficient", matching)


def _open(
    index: ClusterIndex, request: RequestFacts, usable: list[Candidate]
) -> tuple[list[Candidate], list[Candidate]]:
    """Of *usable*, those neither taken nor blocked, and of them those free for the request.

    Free: its taints are tolerated as well.
    """
    open_, free = [], []
    for candidate in usable:  # the candidates themselves: no new tuple a device
        pool, device = candidate
        if not _unclaimed(index, request, pool, device) or blocked(device, pool):
            continue
        open_.append(candidate)
        if not request.tolerations:  # every blocking taint forbids
            if not device.taints and not (index.rules and any(index.taints(pool, device))):
                free.append(candidate)
        elif not any(_forbids(request, taint) for taint in index.taints(pool, device)):
            free.append(candidate)
    return open_, free


def _reaches(usable: list[Candidate], count: int) -> bool:
    """Whether some node could take *count* of *usable* together, were nothing in use.

    One device: any that allows several allocations or fits its pool's counters alone (the
    usual request, answered at the first such device); more: see :func:`_most`.
    """
    if count <= 1:
        return any(
            device.capacities is not None or not blocked(device, pool, NOTHING)
            for pool, device in usable
        )
    return _most(usable) >= count


def _most(usable: list[Candidate]) -> float:
    """The most of *usable* that fit together on one node, were nothing in use.

    Per pool and node (see :func:`.headroom.most`); network-attached devices count on every
    node.
    """
    grouped: dict[int, dict[str, list[DeviceFacts]]] = {}
    pools: dict[int, Pool] = {}
    for pool, device in usable:
        nodes = grouped.get(id(pool))
        if nodes is None:
            nodes = grouped[id(pool)] = {}
            pools[id(pool)] = pool
        devices = nodes.get(device.node)
        if devices is None:
            nodes[device.node] = [device]
        else:
            devices.append(device)
    per_node: dict[str, float] = {}
    for key, nodes in grouped.items():
        for node, devices in nodes.items():
            per_node[node] = per_node.get(node, 0.0) + most(pools[key], devices)
    everywhere = per_node.pop("", 0.0)
    return max((n + everywhere for n in per_node.values()), default=everywhere)


def _matching(index: ClusterIndex, request: RequestFacts) -> tuple[list[Candidate], str] | None:
    """The devices the class and the request's own selectors match, and an own selector's error.

    The error is "" when every own selector could be evaluated; None when the budget ran out.
    """
    candidates = index.by_class.get(request.deviceclass, [])
    own = ""
    if request.selectors and candidates:
        pools = list(index.pools_by_class[request.deviceclass].values())
        answers = index.selectors.answers(request.deviceclass, request.selectors, pools)
        if answers is None:
            return None
        kept = []
        last, of_pool = None, _NONE
        for candidate in candidates:
            pool, device = candidate
            if pool is not last:  # looked up per pool: its devices come one after another
                last, of_pool = pool, answers.get(id(pool), _NONE)
            answer = of_pool.get(device.name, False)
            if answer is True:
                kept.append(candidate)
            elif answer is not False:
                own = own or f"on device {pool.driver}/{pool.name}/{device.name}: {answer}"
        candidates = kept
    return candidates, own


def _forbids(request: RequestFacts, taint: tuple[str, str, str]) -> bool:
    return not gated.tolerated(request.tolerations, *taint)


def _unclaimed(index: ClusterIndex, request: RequestFacts, pool: Pool, device: DeviceFacts) -> bool:
    """Whether the device is not allocated, or still has room for the request."""
    key = (pool.driver, pool.name, device.name)
    if request.admin:
        return True  # adminAccess may use a device in use
    if device.capacities is not None:
        return _room(request, device, index.consumed.get(key, {}))
    return key not in index.allocated


def _room(request: RequestFacts, device: DeviceFacts, used: dict[str, float]) -> bool:
    """Whether a device allowing several allocations has what the request consumes left."""
    if not request.capacity:
        return shares(device, used) >= 1
    asked = dict(request.capacity)
    for name, value in (device.capacities or {}).items():
        need = asked.get(name, (device.defaults or {}).get(name, value))
        if need > value - used.get(name, 0.0) + 1e-9 * max(1.0, need):
            return False
    return True


def _per_node(index: ClusterIndex, request: RequestFacts, free: list[Candidate]) -> dict[str, int]:
    """Per node, how many of the free devices can be taken together, counters deducted.

    A network-attached device (node "") is counted on every node.
    """
    taken: dict[int, dict[tuple[str, str], float]] = {}
    everywhere = 0
    counts: dict[str, int] = {}
    for pool, device in free:
        consumed = taken.setdefault(id(pool), dict(pool.consumed))
        if device.consumes and blocked(device, pool, consumed):
            continue
        take(device, consumed)
        if device.node:
            counts[device.node] = counts.get(device.node, 0) + 1
        else:
            everywhere += 1
    return {node: count + everywhere for node, count in counts.items()} or {"": everywhere}


def _all_fit(
    index: ClusterIndex, request: RequestFacts, candidates: list[Candidate], free: list[Candidate]
) -> bool:
    """``All``: on some node, every matching device there is free and they fit together."""
    free_keys = {id(device) for _, device in free}
    nodes = {device.node for _, device in candidates if device.node} or {""}
    for node in nodes:
        here = [(p, d) for p, d in candidates if d.node in (node, "")]
        if all(id(d) in free_keys for _, d in here):
            consumed: dict[int, dict[tuple[str, str], float]] = {}
            fits = True
            for pool, device in here:
                taken = consumed.setdefault(id(pool), dict(pool.consumed))
                if blocked(device, pool, taken):
                    fits = False
                    break
                take(device, taken)
            if fits:
                return True
    return False


STEPS = 4096
"""Devices tried, at most, to place a claim's requests together on one node."""
ALL_STEPS = 65536
"""Devices tried, at most, over every node, for one claim's requests."""
DEPTH = 256
"""Devices a claim's requests ask for together, at most, for a search to be made."""
COMBINATIONS = 16
"""Choices among ``firstAvailable`` alternatives tried, at most."""


def apart(index: ClusterIndex, requests: tuple[RequestFacts, ...], judged: list[Judgement]) -> bool:
    """Whether each of the claim's requests is feasible alone but no node takes them together.

    A ``firstAvailable`` request counts as feasible when one of its alternatives is, and each
    choice of feasible alternatives is tried.  Not said (False) where it cannot be shown within
    bounds: for ``allocationMode: All``, beyond :data:`COMBINATIONS` choices or :data:`STEPS`.
    Kept per index, for equal claims.
    """
    choices: dict[str, list[RequestFacts]] = {}
    for request, judgement in zip(requests, judged, strict=True):
        feasible = judgement.reason == "feasible" and not request.all
        options = choices.setdefault(request.name.partition("/")[0], [])
        if feasible:
            options.append(request)
    if len(choices) < 2 or not all(choices.values()):
        return False
    if math.prod(len(options) for options in choices.values()) > COMBINATIONS:
        return False
    key = ("apart", requests)
    known = index.judged.get(key)
    if known is None:
        known = index.judged[key] = not any(
            _together(index, chosen) for chosen in itertools.product(*choices.values())
        )
    return bool(known)


def _together(
    index: ClusterIndex, requests: tuple[RequestFacts, ...], unknown: bool = True
) -> bool:
    """Whether some node takes every request at its count at once from free devices.

    Shared counters are deducted across the requests; constraints are not evaluated.  A search
    in the allocator's order, trying other devices when one taken leaves too little, within
    :data:`STEPS` a node and :data:`ALL_STEPS` in all, for at most :data:`DEPTH` devices
    (beyond them, the answer is *unknown*).
    A node whose free devices cannot hold the claim, counters bounding them as for
    ``exceeds_capacity``, is not searched.
    """
    free = [_by_node(index, request) for request in requests]
    nodes = sorted({node for found in free for node in found if node}) or [""]
    total = sum(request.count for request in requests)
    if total > DEPTH:
        return unknown
    left = ALL_STEPS
    for node in nodes:
        needs = [
            (request.count, [*found.get(node, ()), *found.get("", ())] if node else found[""])
            for request, found in zip(requests, free, strict=True)
            if node in found or "" in found
        ]
        if len(needs) < len(requests):
            continue
        if any(len(options) < count for count, options in needs):
            continue
        union = {id(device): (pool, device) for _, options in needs for pool, device in options}
        if _bound(list(union.values())) < total:
            continue
        steps = [min(STEPS, left)]
        try:
            if _place(needs, 0, 0, 0, set(), {}, steps):
                return True
        except _OutOfSteps:
            if unknown:
                return True
        left -= min(STEPS, left) - max(steps[0], 0)
        if left <= 0:
            return unknown
    return False


def _by_node(index: ClusterIndex, request: RequestFacts) -> dict[str, list[Candidate]]:
    """The request's free devices by node ("" for network-attached ones), kept per index."""
    key = ("by node", request)
    known: dict[str, list[Candidate]] | None = index.judged.get(key)
    if known is None:
        known = index.judged[key] = {}
        for candidate in _free(index, request):
            node = candidate[1].node
            found = known.get(node)
            if found is None:
                known[node] = [candidate]
            else:
                found.append(candidate)
    return known


def _bound(candidates: list[Candidate]) -> float:
    """At most how many of *candidates* fit together, counters bounding each pool's."""
    grouped: dict[int, tuple[Pool, list[DeviceFacts]]] = {}
    for pool, device in candidates:
        found = grouped.get(id(pool))
        if found is None:
            grouped[id(pool)] = (pool, [device])
        else:
            found[1].append(device)
    return sum(most(pool, devices) for pool, devices in grouped.values())


class _OutOfSteps(Exception):
    """The search for a placement took more than :data:`STEPS`."""


def _place(
    needs: list[tuple[int, list[Candidate]]],
    at: int,
    placed: int,
    start: int,
    taken: set[int],
    consumed: dict[int, dict[tuple[str, str], float]],
    steps: list[int],
) -> bool:
    """Place request *at*'s devices from *start* on, *placed* of them already, then the rest."""
    if at == len(needs):
        return True
    count, options = needs[at]
    if placed == count:
        return _place(needs, at + 1, 0, 0, taken, consumed, steps)
    for place in range(start, len(options) - (count - placed) + 1):
        steps[0] -= 1
        if steps[0] < 0:
            raise _OutOfSteps
        pool, device = options[place]
        if device.capacities is not None:  # shareable: room for each request was judged alone
            if _place(needs, at, placed + 1, place + 1, taken, consumed, steps):
                return True
            continue
        if id(device) in taken:
            continue
        used = consumed.setdefault(id(pool), dict(pool.consumed))
        if device.consumes and blocked(device, pool, used):
            continue
        take(device, used)
        taken.add(id(device))
        if _place(needs, at, placed + 1, place + 1, taken, consumed, steps):
            return True
        take(device, used, -1)
        taken.discard(id(device))
    return False


def _free(index: ClusterIndex, request: RequestFacts) -> list[Candidate]:
    """The matching devices free for the request (kept per index)."""
    key = ("free", request)
    known: list[Candidate] | None = index.judged.get(key)
    if known is None:
        candidates = (_matching(index, request) or ([], ""))[0]
        usable = [candidate for candidate in candidates if candidate[0].state == USABLE]
        known = index.judged[key] = _open(index, request, usable)[1]
    return known


def reasons(
    index: ClusterIndex, report: bool = False
) -> Iterator[tuple[object, str, str, str, Judgement]]:
    """(claim labels, request, class, reason, judgement) for each request of each pending claim.

    With *report*, a claim's own selector that cannot be evaluated is reported as a problem.
    """
    for claim in index.claims:
        if not claim.home:
            continue
        judged = [judge(index, request) for request in claim.pending]
        if len(claim.pending) > 1 and apart(index, claim.pending, judged):
            judged = [
                attrs.evolve(j, reason="not_together") if j.reason == "feasible" else j
                for j in judged
            ]
        for request, judgement in zip(claim.pending, judged, strict=True):
            if judgement.reason == NOT_JUDGED:
                if report:
                    index.problems.add(
                        RESOURCE_CLAIMS.plural,
                        "selectors",
                        f"{claim.where} request {request.name}: not judged in this collection "
                        f"(its own selectors, with those of other pending claims, need more "
                        f"than {BUDGET} device evaluations; the next collections go on)",
                    )
                continue
            if report and judgement.error:
                index.problems.add(
                    RESOURCE_CLAIMS.plural,
                    "selectors",
                    f"{claim.where} request {request.name} selector {judgement.error}",
                )
            yield claim.labels, request.name, request.deviceclass, judgement.reason, judgement
