"""How many more one-device claims of a class the allocator would place in a pool.

``count(device_state{state="available"})`` overstates what fits wherever partitions share
counters: a GPU and its MIG partitions are all available until one is taken.  This walks the
pool as the allocator's first fit does, for a claim asking one device of the class (no
selectors, no tolerations, not adminAccess): the pool's devices in its order (slices by name),
each free device the class selects taken, its counters deducted from what the pool has left, so
that the devices the deductions block are skipped.  A device that allows multiple allocations is
taken as many times as its capacities leave room for a request naming none of them.

The allocator skips a device in use before it evaluates any selector, and a selector that fails
to evaluate on a device it reaches fails the whole claim: so does the walk, which ends the
class's count at the first device (not in use) on which the class's selectors fail.  With
NVIDIA's layout, the whole GPU (no ``profile`` attribute) before its partitions, a class
selecting partitions by ``profile`` fits none wherever a whole GPU is free.

:func:`capacity` answers another question, for ``exceeds_capacity``: how many devices of a class
could ever be taken together on a node, were nothing in use and every taint tolerated.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from operator import attrgetter
from types import MappingProxyType
from typing import cast

import attrs

from kdraexp.allocator.facts import TOLERANCE, DeviceFacts
from kdraexp.allocator.index import USABLE, ClusterIndex, Kept, Pool, blocked, take
from kdraexp.dra.nodeselector import NodeSelector

_NOTHING: Mapping[tuple[str, str], float] = MappingProxyType({})
_SHAREABLE = attrgetter("shareable")
"""Whether a device allows multiple allocations (it has capacities then)."""
_CONSUMES = attrgetter("consumes")


Where = str | NodeSelector | None
"""Where devices serve: the node they are bound to, the node selector placing them (their own
or their slice's), or None for every node."""


@attrs.define
class HeadroomMemo(Kept):
    """What first fit placed, kept per pool until its use changes."""

    fits: dict[tuple[str, str], tuple[tuple[Where, str, float], ...]] = attrs.Factory(dict)
    """Per pool, its first fit per class and where its devices serve (a node, a node selector,
    every node): the headroom family and pending requests' summaries both read it."""

    def consume(self, key: tuple[str, str]) -> None:
        """The pool's fit is not what it was."""
        self.fits.pop(key, None)


def allocatable(index: ClusterIndex, pool: Pool) -> tuple[tuple[str, str, float], ...]:
    """(node, class, how many more fit) for each class that selects a device of the pool.

    The fit of devices bound to no node is on the node "" (see :func:`where_fits` for where).
    """
    found = where_fits(index, pool)
    if pool.bound:
        return cast(tuple[tuple[str, str, float], ...], found)  # each on its node already
    merged: dict[tuple[str, str], float] = {}
    for where, deviceclass, count in found:
        key = (where if type(where) is str else "", deviceclass)
        merged[key] = merged.get(key, 0.0) + count
    return tuple([(node, deviceclass, count) for (node, deviceclass), count in merged.items()])


def where_fits(index: ClusterIndex, pool: Pool) -> tuple[tuple[Where, str, float], ...]:
    """(where, class, how many more fit) for each class that selects a device of the pool.

    A pool that is not usable fits none; a pool whose devices serve different nodes (per-device
    node selection) is counted per node and per node selector, its counters shared by all.
    Kept in the index until the pool's use changes.
    """
    fits = index.memo.of(HeadroomMemo).fits
    key = (pool.driver, pool.name)
    found = fits.get(key)
    if found is None:
        found = fits[key] = tuple(_first_fit(index, pool))
    return found


def _where(device: DeviceFacts) -> Where:
    return device.node or device.selector


def _first_fit(index: ClusterIndex, pool: Pool) -> Iterator[tuple[Where, str, float]]:
    for deviceclass in dict.fromkeys(c for device in pool.devices for c in device.classes):
        counts = {_where(d): 0.0 for d in pool.devices if deviceclass in d.classes}
        consumed = dict(pool.consumed)
        for device in pool.devices if pool.state == USABLE else ():
            if deviceclass not in device.classes:
                if deviceclass in device.unsure and not _in_use(index, pool, device):
                    break  # the claim reaching it fails, and every later one
                continue
            key = (pool.driver, pool.name, device.name)
            allocated = key in index.allocated
            if any(index.taints(pool, device)):
                continue
            if device.capacities is not None:
                fits = shares(device, index.consumed.get(key, {}))
                if not allocated and fits:  # a device already shared has its counters taken
                    if blocked(device, pool, consumed):
                        continue
                    take(device, consumed)
            elif allocated or blocked(device, pool, consumed):
                continue
            else:
                take(device, consumed)
                fits = 1.0
            counts[_where(device)] += fits
        for node, count in counts.items():
            yield node, deviceclass, count


def _in_use(index: ClusterIndex, pool: Pool, device: DeviceFacts) -> bool:
    """Whether the allocator skips the device before any selector: allocated, not shareable."""
    allocated = (pool.driver, pool.name, device.name) in index.allocated
    return allocated and device.capacities is None


def shares(device: DeviceFacts, used: Mapping[str, float]) -> float:
    """How many more requests naming no capacity a device allowing several still takes.

    Each consumes every capacity's default (its request policy's, else the whole capacity); a
    capacity of which such a request consumes nothing bounds nothing (+Inf when none does), nor
    does one holding more of them than a float counts.
    """
    fits = math.inf
    for name, value in (device.capacities or {}).items():
        need = (device.defaults or {}).get(name, value)
        if need <= 0:
            continue
        left = (value - used.get(name, 0.0)) / need + TOLERANCE
        if left < 1:
            return 0.0
        if left < math.inf:
            fits = min(fits, math.floor(left))
    return fits


def capacity(pool: Pool) -> tuple[tuple[str, str, float], ...]:
    """(node, class, most devices of the class that fit together) for the pool's devices.

    Nothing in use and every taint tolerated: only the pool's shared counters bound it (see
    :func:`most`).  Kept on the pool while its slices do not change.
    """
    if pool.most is None:
        grouped: dict[tuple[str, str], list[DeviceFacts]] = {}
        for device in pool.devices:
            for deviceclass in device.classes:
                devices = grouped.get((device.node, deviceclass))
                if devices is None:
                    grouped[(device.node, deviceclass)] = [device]
                else:
                    devices.append(device)
        pool.most = tuple(
            (node, deviceclass, most(pool, devices))
            for (node, deviceclass), devices in grouped.items()
        )
    return pool.most


def most(pool: Pool, devices: list[DeviceFacts], distinct: bool = False) -> float:
    """At most how many of the pool's *devices* the allocator could take together.

    An upper bound, exact for partitions of one GPU: a device needing more of a counter than the
    pool has never fits; of the devices consuming a counter, no more than its total covers (the
    smallest needs first) fit together, whatever the others do.  So a whole GPU and its own
    partition are one.  A device that allows multiple allocations bounds nothing (+Inf): a
    claim's requests may each take it; with *distinct*, for one request, which takes a device
    once at most, it counts as one.
    """
    if not distinct and any(map(_SHAREABLE, devices)):
        return math.inf
    if not any(map(_CONSUMES, devices)):
        return float(len(devices))  # no counter to share: none blocks another
    fitting = [device for device in devices if not blocked(device, pool, _NOTHING)]
    needs: dict[tuple[str, str], list[float]] = {}
    for device in fitting:
        for counter_set, counters in device.consumes:
            for counter, need in counters.items():
                if need > 0:
                    needs.setdefault((counter_set, counter), []).append(need)
    bound = len(fitting)
    for key, asked in needs.items():
        left, fit = pool.totals.get(key, 0.0), 0
        for need in sorted(asked):
            left -= need
            if left < -TOLERANCE * max(1.0, need):
                break
            fit += 1
        bound = min(bound, len(fitting) - len(asked) + fit)
    return float(bound)
