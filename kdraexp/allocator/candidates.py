"""The devices a pending request may take: those its class and own selectors match, free.

Matching reads the class's devices and the answers of the request's own selectors
(:mod:`.answers`); free means neither taken (or, shared, with room left for what the request
consumes, rounded as the allocator rounds it: :mod:`.rounding`) nor blocked by counters, and its
taints tolerated.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

from kdraexp.allocator.facts import NOTHING, DeviceFacts, RequestFacts
from kdraexp.allocator.index import USABLE, ClusterIndex, Kept, Pool, blocked
from kdraexp.allocator.rounding import consumption, room
from kdraexp.dra import gated

Candidate = tuple[Pool, DeviceFacts]
NO_ANSWERS: Mapping[str, bool | str] = MappingProxyType({})
"""A pool no own selector was answered on (one read-only mapping for all)."""


@attrs.define
class CandidateMemo(Kept):
    """What finding a request's devices keeps for the collection."""

    consumes: dict[
        tuple[tuple[tuple[str, float], ...], tuple[int, int, int]], Mapping[str, float] | None
    ] = attrs.Factory(dict)
    """Per request's capacity and kind of device, what it consumes (None: never fits)."""
    free: dict[RequestFacts, list[Candidate]] = attrs.Factory(dict)
    """Per request, its matching devices free for it."""

    def begin(self) -> None:
        """Both are the last collection's."""
        self.consumes = {}
        self.free = {}


def open_and_free(
    index: ClusterIndex, request: RequestFacts, usable: list[Candidate]
) -> tuple[list[Candidate], list[Candidate]]:
    """Of *usable*, those neither taken nor blocked, and of them those free for the request.

    Free: its taints are tolerated as well.
    """
    open_, free = [], []
    for candidate in usable:  # the candidates themselves: no new tuple a device
        pool, device = candidate
        if not unclaimed(index, request, pool, device) or blocked(device, pool):
            continue
        open_.append(candidate)
        if not request.tolerations:  # every blocking taint forbids
            if not device.taints and not (index.rules and any(index.taints(pool, device))):
                free.append(candidate)
        elif not any(_forbids(request, taint) for taint in index.taints(pool, device)):
            free.append(candidate)
    return open_, free


def matched_devices(
    index: ClusterIndex, request: RequestFacts
) -> tuple[list[Candidate], str] | None:
    """The devices the class and the request's own selectors match, and an own selector's error.

    The error is "" when every own selector could be evaluated; None when the budget ran out.
    """
    candidates = index.by_class.get(request.deviceclass, [])
    own = ""
    if request.selectors and candidates:
        pools = list(index.pools_by_class[request.deviceclass].values())
        assert index.selectors is not None  # every round gives them
        answers = index.selectors.answers(request.deviceclass, request.selectors, pools)
        if answers is None:
            return None
        kept = []
        last, of_pool = None, NO_ANSWERS
        for candidate in candidates:
            pool, device = candidate
            if pool is not last:  # looked up per pool: its devices come one after another
                last, of_pool = pool, answers.get(id(pool), NO_ANSWERS)
            answer = of_pool.get(device.name, False)
            if answer is True:
                kept.append(candidate)
            elif answer is not False:
                own = own or f"on device {pool.driver}/{pool.name}/{device.name}: {answer}"
        candidates = kept
    return candidates, own


def _forbids(request: RequestFacts, taint: tuple[str, str, str]) -> bool:
    return not gated.tolerated(request.tolerations, *taint)


def unclaimed(index: ClusterIndex, request: RequestFacts, pool: Pool, device: DeviceFacts) -> bool:
    """Whether the device is not allocated, or still has room for the request."""
    key = (pool.driver, pool.name, device.name)
    if request.admin:
        return True  # adminAccess may use a device in use
    if device.capacities is not None:
        return _room(index, request, device, index.consumed.get(key, NOTHING))
    return key not in index.allocated


def _room(
    index: ClusterIndex, request: RequestFacts, device: DeviceFacts, used: Mapping[str, float]
) -> bool:
    """Whether a device allowing several allocations has what the request consumes left.

    What it consumes is rounded as the allocator rounds it (see :mod:`.rounding`).
    """
    need = consumed(index, request, device)
    return need is not None and room(device, need, used)


def consumed(
    index: ClusterIndex, request: RequestFacts, device: DeviceFacts
) -> Mapping[str, float] | None:
    """What the request consumes of each capacity of a device allowing several allocations.

    None when it never can (see :func:`.rounding.consumption`).  Kept for the collection per
    request and kind of device: the devices of one model share their capacities' mappings.
    """
    consumes = index.memo.of(CandidateMemo).consumes
    key = (request.capacity, (id(device.capacities), id(device.defaults), id(device.policies)))
    if key in consumes:
        return consumes[key]
    known = consumes[key] = consumption(device, dict(request.capacity))
    return known


def ever_fits(index: ClusterIndex, request: RequestFacts, device: DeviceFacts) -> bool:
    """Whether the device could give the request what it consumes, were nothing allocated.

    A device that allows a single allocation always could: a request's capacity is judged on
    devices that allow several.
    """
    return device.capacities is None or _room(index, request, device, NOTHING)


def shared_state(
    index: ClusterIndex, request: RequestFacts, pool: Pool, device: DeviceFacts
) -> str:
    """The state for the request of an allocated device allowing several allocations.

    ``allocated`` while it has no room left for what the request consumes; with room, the state
    it would have without its shares (never ``blocked``: its counters are its own).  An
    adminAccess request sees it ``allocated``, as any device in use.
    """
    if request.admin:
        return "allocated"
    used = index.consumed.get((pool.driver, pool.name, device.name), NOTHING)
    if not _room(index, request, device, used):
        return "allocated"
    return index.unallocated_state(pool, device, counters=False)


def free_devices(index: ClusterIndex, request: RequestFacts) -> list[Candidate]:
    """The matching devices free for the request (kept for the collection)."""
    free = index.memo.of(CandidateMemo).free
    known = free.get(request)
    if known is None:
        candidates = (matched_devices(index, request) or ([], ""))[0]
        usable = [candidate for candidate in candidates if candidate[0].state == USABLE]
        known = free[request] = open_and_free(index, request, usable)[1]
    return known


def found_free(index: ClusterIndex, request: RequestFacts, free: list[Candidate]) -> None:
    """Keep *free*, the request's free devices a judgement found, for :func:`free_devices`."""
    index.memo.of(CandidateMemo).free[request] = free
