"""How many more one-device claims of a class the allocator would place in a pool.

``count(device_state{state="available"})`` overstates what fits wherever partitions share
counters: a GPU and its MIG partitions are all available until one is taken.  This walks the
pool as the allocator's first fit does, for a claim asking one device of the class (no
selectors, no tolerations, not adminAccess): the pool's devices in its order (slices by name),
each free device the class selects taken, its counters deducted from what the pool has left, so
that the devices the deductions block are skipped.  A device that allows multiple allocations is
taken as many times as its capacities leave room for a request naming none of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from kdraexp.families.index import USABLE, ClusterIndex, DeviceFacts, Pool, blocked, take


def allocatable(index: ClusterIndex, pool: Pool) -> tuple[tuple[str, str, float], ...]:
    """(node, class, how many more fit) for each class that selects a device of the pool.

    A pool that is not usable fits none; a pool whose devices sit on several nodes (per-device
    node selection) is counted per node, its counters shared by all.  Kept in the index until
    the pool's use changes.
    """
    key = (pool.driver, pool.name)
    found = index.fits.get(key)
    if found is None:
        found = index.fits[key] = tuple(_first_fit(index, pool))
    return found


def _first_fit(index: ClusterIndex, pool: Pool) -> Iterator[tuple[str, str, float]]:
    for deviceclass in dict.fromkeys(c for device in pool.devices for c in device.classes):
        counts: dict[str, float] = {}
        consumed = dict(pool.consumed)
        for device in pool.devices:
            if deviceclass not in device.classes:
                continue
            counts.setdefault(device.node, 0.0)
            if pool.state != USABLE or any(index.taints(pool, device)):
                continue
            key = (pool.driver, pool.name, device.name)
            allocated = key in index.allocated
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
            counts[device.node] += fits
        for node, count in counts.items():
            yield node, deviceclass, count


def shares(device: DeviceFacts, used: Mapping[str, float]) -> float:
    """How many more requests naming no capacity a device allowing several still takes.

    Each consumes every capacity's default (its request policy's, else the whole capacity); a
    capacity of which such a request consumes nothing bounds nothing (+Inf when none does).
    """
    fits = math.inf
    for name, value in (device.capacities or {}).items():
        need = (device.defaults or {}).get(name, value)
        if need <= 0:
            continue
        left = value - used.get(name, 0.0)
        fits = min(fits, max(0.0, math.floor(left / need + 1e-9)))
    return fits
