"""Why a pending claim's request cannot be allocated, judged as the allocator judges it.

The scheduler gives every cause one sentence ("cannot allocate all claims"); this names it.  Each
request (or ``firstAvailable`` alternative) is judged alone against what the allocator sees: the
devices its class and its own selectors match (current generations only), their pools' states,
their taints against its tolerations, what is allocated, and the counters.  The first reason that
applies is the one given (the metrics reference lists them in order); ``feasible`` says the
request alone could be allocated now, so the claim waits for something else: its pod's node
selection (pinned away from the nodes its devices are on: ``unreachable`` with the Node view),
CPU or memory, the scheduler.

Equal requests get one judgement per collection: claims made from one template cost one.  The
devices a request matches and may take are found by :mod:`.candidates`; whether several fit
together on a node by :mod:`.together`.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from kdraexp.allocator.answers import BUDGET
from kdraexp.allocator.candidates import (
    Candidate,
    ever_fits,
    found_free,
    matched_devices,
    open_and_free,
    shared_state,
)
from kdraexp.allocator.facts import NOTHING, ClaimFacts, DeviceFacts, RequestFacts
from kdraexp.allocator.headroom import allocatable, capacity, most
from kdraexp.allocator.index import USABLE, ClusterIndex, Kept, Pool, blocked, take
from kdraexp.allocator.reach import allowed, reachable, waiting
from kdraexp.allocator.together import apart, together
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
    "unreachable",
    "feasible",
)
"""Every reason, in the order they are tried."""

NOT_JUDGED = "not_judged"
"""No reason yet: the collection's budget for claims' own selectors ran out first."""


@attrs.frozen
class Judgement:
    """A request's reason, and how many devices it matches in each device state."""

    reason: str
    matching: tuple[tuple[str, int], ...] = ()
    error: str = ""
    """Why one of the request's own selectors could not be evaluated, if one could not."""


def judge(index: ClusterIndex, request: RequestFacts) -> Judgement:
    """The request's reason (kept for the collection: equal requests are judged once)."""
    judged = index.memo.of(PendingMemo).judged
    known = judged.get(request)
    if known is None:
        known = judged[request] = _judge(index, request)
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


@attrs.define
class PendingMemo(Kept):
    """What judging pending requests keeps of the index."""

    judged: dict[RequestFacts, Judgement] = attrs.Factory(dict)
    """Pending requests judged in this collection."""
    summaries: dict[tuple[str, str], Summary] = attrs.Factory(dict)
    """Per pool, what plain requests read of it, until its use changes."""
    totals: dict[str, Totals] = attrs.Factory(dict)
    """Per class, its pools' summaries added up."""
    stale: dict[str, set[tuple[str, str]]] = attrs.Factory(dict)
    """Per class, the pools whose summary changed since its totals were added up."""

    def consume(self, key: tuple[str, str]) -> None:
        """The pool's summary is made again; its classes' totals take it out then."""
        old = self.summaries.pop(key, None)
        if old is not None:
            for deviceclass in old.classes:
                self.stale.setdefault(deviceclass, set()).add(key)

    def begin(self) -> None:
        """Requests are judged again; summaries and totals follow the pools."""
        self.judged = {}


def totals(index: ClusterIndex, deviceclass: str) -> Totals:
    """The class's totals, brought up to the pools whose use changed since."""
    pools = index.pools_by_class.get(deviceclass, {})
    memo = index.memo.of(PendingMemo)
    made: Totals | None = memo.totals.get(deviceclass)
    stale = memo.stale.pop(deviceclass, set())
    if made is None:
        made = memo.totals[deviceclass] = Totals(deviceclass)
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
    summaries = index.memo.of(PendingMemo).summaries
    made: Summary | None = summaries.get(key)
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
        made = summaries[key] = Summary(
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
    found = matched_devices(index, request)
    if found is None:
        return Judgement(NOT_JUDGED)
    candidates, own = found
    error = request.deviceclass in index.unsure
    states: dict[str, int] = {}
    for pool, device in candidates:
        state = index.state(pool, device)
        if state == "allocated" and device.capacities is not None:  # shared: room for this one?
            state = shared_state(index, request, pool, device)
        states[state] = states.get(state, 0) + 1
    matching = tuple(sorted(states.items()))
    if error or own:
        return Judgement("selector_error", matching, own)
    if not candidates:
        return Judgement("no_matching_device", matching)
    usable = [candidate for candidate in candidates if candidate[0].state == USABLE]
    if not usable:
        return Judgement("pool_unusable", matching)
    able = _able(index, request, usable)
    if not able or (not request.all and not _reaches(able, request.count)):
        return Judgement("exceeds_capacity", matching)
    open_, free = open_and_free(index, request, able)
    if not free:
        return Judgement("tainted" if open_ else "in_use", matching)
    if request.all:  # the allocator takes every device that could ever give what it consumes
        every = _able(index, request, candidates)
        fits = len(usable) == len(candidates) and _all_fit(index, request, every, free)
    else:
        fits = any(n >= request.count for n in _per_node(index, request, free).values())
        if not fits:  # first fit is not the allocator's search: search, within bounds
            found_free(index, request, free)
            fits = together(index, (request,), unknown=False)
    return Judgement("feasible" if fits else "insufficient", matching)


def _able(index: ClusterIndex, request: RequestFacts, found: list[Candidate]) -> list[Candidate]:
    """Of *found*, the devices that could ever give the request what it consumes."""
    return [c for c in found if c[1].capacities is None or ever_fits(index, request, c[1])]


def _reaches(usable: list[Candidate], count: int) -> bool:
    """Whether some node could take *count* of *usable* together, were nothing in use.

    One device: any that fits its pool's counters alone (the usual request, answered at the
    first such device); more: see :func:`_most`.
    """
    if count <= 1:
        return any(not blocked(device, pool, NOTHING) for pool, device in usable)
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
            per_node[node] = per_node.get(node, 0.0) + most(pools[key], devices, distinct=True)
    everywhere = per_node.pop("", 0.0)
    return max((n + everywhere for n in per_node.values()), default=everywhere)


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
        feasible = [judgement.reason == "feasible" for judgement in judged]
        if len(claim.pending) > 1 and apart(index, claim.pending, feasible):
            judged = [
                attrs.evolve(j, reason="not_together") if j.reason == "feasible" else j
                for j in judged
            ]
        if index.nodes is not None and any(j.reason == "feasible" for j in judged):
            judged = _reached(index, claim, judged)
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


def _reached(index: ClusterIndex, claim: ClaimFacts, judged: list[Judgement]) -> list[Judgement]:
    """``unreachable`` for each feasible request no node its waiting pods may use can meet."""
    pods = waiting(index, claim)
    if not pods:
        return judged
    assert index.nodes is not None
    nodes = allowed(index.nodes.values(), pods)
    return [
        attrs.evolve(j, reason="unreachable")
        if j.reason == "feasible" and not reachable(index, request, nodes)
        else j
        for request, j in zip(claim.pending, judged, strict=True)
    ]
