"""Whether a claim's requests fit together on one node: a bounded search in the allocator's order.

Each request may be feasible alone and yet no node take them all at once (shared counters, the
same few devices).  The search tries devices as the allocator does, within step budgets, and says
"unknown" where it cannot finish.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import NamedTuple

import attrs

from kdraexp.allocator.candidates import Candidate, consumed, free_devices
from kdraexp.allocator.facts import DeviceFacts, RequestFacts
from kdraexp.allocator.headroom import most
from kdraexp.allocator.index import ClusterIndex, Kept, Pool, blocked, take
from kdraexp.allocator.rounding import room

STEPS = 4096
"""Devices tried, at most, to place a claim's requests together on one node."""
ALL_STEPS = 65536
"""Devices tried, at most, over every node, for one claim's requests."""
DEPTH = 256
"""Devices a claim's requests ask for together, at most, for a search to be made."""
COMBINATIONS = 16
"""Choices among ``firstAvailable`` alternatives tried, at most."""


@attrs.define
class TogetherMemo(Kept):
    """What the search keeps for the collection: equal claims are searched once."""

    apart: dict[tuple[RequestFacts, ...], bool] = attrs.Factory(dict)
    """Per claim's requests, whether each fits alone but no node takes them together."""
    by_node: dict[RequestFacts, dict[str, list[Candidate]]] = attrs.Factory(dict)
    """Per request, its free devices by node."""

    def begin(self) -> None:
        """Free devices are the new collection's."""
        self.apart = {}
        self.by_node = {}


def apart(index: ClusterIndex, requests: tuple[RequestFacts, ...], feasible: list[bool]) -> bool:
    """Whether each of the claim's requests is feasible alone but no node takes them together.

    A ``firstAvailable`` request counts as feasible when one of its alternatives is, and each
    choice of feasible alternatives is tried.  Not said (False) where it cannot be shown within
    bounds: for ``allocationMode: All``, beyond :data:`COMBINATIONS` choices or :data:`STEPS`.
    Kept for the collection, for equal claims.
    """
    choices: dict[str, list[RequestFacts]] = {}
    for request, alone in zip(requests, feasible, strict=True):
        options = choices.setdefault(request.name.partition("/")[0], [])
        if alone and not request.all:
            options.append(request)
    if len(choices) < 2 or not all(choices.values()):
        return False
    if math.prod(len(options) for options in choices.values()) > COMBINATIONS:
        return False
    judged = index.memo.of(TogetherMemo).apart
    known = judged.get(requests)
    if known is None:
        known = judged[requests] = not any(
            together(index, chosen) for chosen in itertools.product(*choices.values())
        )
    return known


def together(index: ClusterIndex, requests: tuple[RequestFacts, ...], unknown: bool = True) -> bool:
    """Whether some node takes every request at its count at once from free devices.

    Shared counters are deducted across the requests, and so is what they consume of a device
    allowing several allocations (rounded, see :mod:`.rounding`); constraints are not
    evaluated.  A search in the allocator's order, trying other devices when one taken leaves
    too little, within :data:`STEPS` a node and :data:`ALL_STEPS` in all, for at most
    :data:`DEPTH` devices (beyond them, the answer is *unknown*).
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
            _Need(
                request,
                request.count,
                [*found.get(node, ()), *found.get("", ())] if node else found[""],
            )
            for request, found in zip(requests, free, strict=True)
            if node in found or "" in found
        ]
        if len(needs) < len(requests):
            continue
        if any(len(need.options) < need.number for need in needs):
            continue
        union = {id(device): (pool, device) for need in needs for pool, device in need.options}
        if _bound(list(union.values())) < total:
            continue
        steps = [min(STEPS, left)]
        shared = {
            id(device): dict(index.consumed.get((pool.driver, pool.name, device.name), {}))
            for pool, device in union.values()
            if device.capacities is not None
        }
        try:
            if _place(needs, 0, 0, 0, _Taken(index, set(), {}, shared), steps):
                return True
        except _OutOfSteps:
            if unknown:
                return True
        left -= min(STEPS, left) - max(steps[0], 0)
        if left <= 0:
            return unknown
    return False


def _by_node(index: ClusterIndex, request: RequestFacts) -> dict[str, list[Candidate]]:
    """The request's free devices by node ("" for network-attached ones), for the collection."""
    by_node = index.memo.of(TogetherMemo).by_node
    known = by_node.get(request)
    if known is None:
        known = by_node[request] = {}
        for candidate in free_devices(index, request):
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


class _Need(NamedTuple):
    """One request to place: how many devices, and its free devices on the node, in order."""

    request: RequestFacts
    number: int
    options: list[Candidate]


class _Taken(NamedTuple):
    """What the devices placed so far take: devices, counters per pool, shared capacities."""

    cluster: ClusterIndex
    devices: set[int]
    counters: dict[int, dict[tuple[str, str], float]]
    shared: dict[int, dict[str, float]]
    """Per device allowing several allocations, what its allocations and the shares placed
    consume of each capacity."""


def _place(
    needs: list[_Need], at: int, placed: int, start: int, taken: _Taken, steps: list[int]
) -> bool:
    """Place request *at*'s devices from *start* on, *placed* of them already, then the rest."""
    if at == len(needs):
        return True
    request, count, options = needs[at]
    if placed == count:
        return _place(needs, at + 1, 0, 0, taken, steps)
    for place in range(start, len(options) - (count - placed) + 1):
        steps[0] -= 1
        if steps[0] < 0:
            raise _OutOfSteps
        pool, device = options[place]
        if device.capacities is not None:  # shared: what each request consumes adds up
            used = taken.shared[id(device)]
            need = consumed(taken.cluster, request, device)
            if need is None or not room(device, need, used):
                continue
            _add(used, need)
            if _place(needs, at, placed + 1, place + 1, taken, steps):
                return True
            _add(used, need, -1)
            continue
        if id(device) in taken.devices:
            continue
        used_counters = taken.counters.setdefault(id(pool), dict(pool.consumed))
        if device.consumes and blocked(device, pool, used_counters):
            continue
        take(device, used_counters)
        taken.devices.add(id(device))
        if _place(needs, at, placed + 1, place + 1, taken, steps):
            return True
        take(device, used_counters, -1)
        taken.devices.discard(id(device))
    return False


def _add(used: dict[str, float], need: Mapping[str, float], by: int = 1) -> None:
    for name, amount in need.items():
        used[name] = used.get(name, 0.0) + by * amount
