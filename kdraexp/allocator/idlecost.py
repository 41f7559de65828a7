"""What a pool's unused capacity would cost per hour, each GPU priced once.

Summing each class's ``hourly-cost`` over the devices it selects counts a device once per class
(a generic and a per-model class overlap) and a GPU once more per partition.  Here a device's
price is the highest among its classes', the pool is cut into the units utilisation counts (a
counter set, a device consuming none), and each unit's unused share is priced once: a counter
set at the whole GPU's list price, worked out from whichever of its devices is priced.

A cost is a float64: prices near its largest (``hourly-cost`` accepts any finite one) can sum
past it.  Such a node's idle cost is no number, so it is not written and the collection counts
a value not read, rather than write ``+Inf`` as a price.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

from kdraexp.allocator.facts import DeviceFacts
from kdraexp.allocator.index import HOURLY_COST, USABLE, ClusterIndex, CostSum, Pool, set_use


def price(costs: Mapping[str, float], device: DeviceFacts) -> float | None:
    """The highest hourly cost among the classes that select the device (None: unpriced)."""
    found: float | None = None
    for deviceclass in device.classes:
        cost = costs.get(deviceclass)
        if cost is not None and (found is None or cost > found):
            found = cost
    return found


def idle_costs(index: ClusterIndex, pool: Pool) -> Iterator[tuple[str, float]]:
    """(node, idle cost per hour) for each node of the pool with a priced unit.

    Nothing for a pool the allocator cannot use, nor one whose devices are all gone, nor a node
    whose cost is past float64 (a problem then).  A unit's idle share is 1 minus its use, never
    below 0 (an over-committed counter idles nothing); a unit that idles nothing costs nothing
    whatever its price.  A counter set's price is the largest, over the priced devices consuming
    it, of the device's price over the share of the set it consumes: a 1g partition of a
    seventh of a GPU priced 0.55 prices the GPU at 3.85, the whole GPU priced 5.00 at 5.00, and
    the set costs 5.00.
    """
    if pool.state != USABLE or not pool.devices:
        return
    sums: dict[str, CostSum] = {}
    set_prices: dict[str, tuple[float, float, float]] = {}
    """Per counter set: the GPU's price, and the device price and share it is worked out from."""
    set_nodes: dict[str, str] = {}
    for device in pool.devices:
        priced = price(index.costs, device)
        if not device.consumes:
            if priced is not None:
                idle = max(0.0, 1.0 - index.device_use(pool, device))
                _on(sums, device.node).add(priced, idle)
            continue
        for counter_set, counters in device.consumes:
            set_nodes.setdefault(counter_set, device.node)
            if priced is None:
                continue
            share = set_use(pool, counter_set, {(counter_set, c): v for c, v in counters.items()})
            if share <= 0:
                continue  # consuming none of the set, it cannot price the whole
            whole = priced / share
            if whole > set_prices.get(counter_set, (-1.0, 0.0, 0.0))[0]:
                set_prices[counter_set] = (whole, priced, share)
    for counter_set, (_, priced, share) in set_prices.items():
        idle = max(0.0, 1.0 - set_use(pool, counter_set))
        _on(sums, set_nodes[counter_set]).add(priced, idle, share)
    for node, summed in sums.items():
        total = summed.total()
        if math.isfinite(total):
            yield node, total
        else:
            index.problems.add(
                "deviceclasses",
                HOURLY_COST,
                f"pool {pool.driver}/{pool.name} node {node!r}: the idle hourly cost of its "
                "priced devices is past the largest float64, so it is not written",
            )


def _on(sums: dict[str, CostSum], node: str) -> CostSum:
    """The sum of *node*'s idle costs, begun if it is not yet (a node priced at 0 is written)."""
    found = sums.get(node)
    if found is None:
        found = sums[node] = CostSum()
    return found
