"""Resource pool families: what PromQL cannot compute from the device rows.

A pool is ``(driver, pool)``.  Generation filtering and counter arithmetic need every slice of the
pool and every claim at once; device counts per state are left to PromQL
(``count by (driver, pool, state) (kube_resourceslice_device_state)``).
"""

from __future__ import annotations

from collections.abc import Iterator

from kdraexp.allocator.headroom import allocatable
from kdraexp.allocator.idlecost import idle_costs
from kdraexp.allocator.index import ClusterIndex
from kdraexp.allocator.nodes import on_nodes
from kdraexp.allocator.scopes import Per
from kdraexp.dra.listing import DEVICE_CLASSES, NODES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kdraexp.families.family import CLUSTER, Row, family
from kdraexp.families.node import ABSENT

_POOL = ("driver", "pool")


@family(
    "kube_resourcepool_generation",
    "The current generation of a resource pool: the highest among its slices.",
    _POOL,
    CLUSTER,
    "spec.driver, spec.pool.{name,generation}",
    needs=(RESOURCE_SLICES,),
    per=Per.POOL,
)
def pool_generation(index: ClusterIndex) -> Iterator[Row]:
    """One row per pool."""
    for pool in index.pools.values():
        yield (pool.driver, pool.name, float(pool.generation))


@family(
    "kube_resourcepool_slices",
    "Slices of a resource pool: expected and published in the current generation, and stale.",
    (*_POOL, "state"),
    CLUSTER,
    "spec.pool.{generation,resourceSliceCount}",
    needs=(RESOURCE_SLICES,),
    per=Per.POOL,
)
def pool_slices(index: ClusterIndex) -> Iterator[Row]:
    """expected (resourceSliceCount), published, stale (slices of older generations)."""
    for pool in index.pools.values():
        if pool.expected is not None:
            yield (pool.driver, pool.name, "expected", float(pool.expected))
        yield (pool.driver, pool.name, "published", float(pool.published))
        yield (pool.driver, pool.name, "stale", float(pool.stale))


@family(
    "kube_resourcepool_complete",
    "1 when a resource pool has published every slice of its current generation, else 0.",
    _POOL,
    CLUSTER,
    "spec.pool.{generation,resourceSliceCount}",
    needs=(RESOURCE_SLICES,),
    per=Per.POOL,
)
def pool_complete(index: ClusterIndex) -> Iterator[Row]:
    """Incomplete pools are skipped by the scheduler's view of capacity and by the autoscaler."""
    for pool in index.pools.values():
        if pool.expected is not None:
            yield (pool.driver, pool.name, 1.0 if pool.published == pool.expected else 0.0)


@family(
    "kube_resourcepool_state",
    "A resource pool's state as the allocator judges it: usable, incomplete, invalid.",
    (*_POOL, "state"),
    CLUSTER,
    "spec.pool.{generation,resourceSliceCount}, spec.devices[].{name,consumesCounters}, "
    "spec.sharedCounters",
    needs=(RESOURCE_SLICES,),
    per=Per.POOL,
)
def pool_state(index: ClusterIndex) -> Iterator[Row]:
    """The allocator allocates from usable pools only; it skips incomplete and invalid ones."""
    for pool in index.pools.values():
        yield (pool.driver, pool.name, pool.state, 1.0)


@family(
    "kube_resourcepool_shared_quantity",
    "A shared counter of a resource pool: its total, and what allocated devices consume.",
    (*_POOL, "counter_set", "counter", "state"),
    CLUSTER,
    "spec.sharedCounters, spec.devices[].consumesCounters, "
    "ResourceClaim status.allocation.devices.results[]",
    needs=(RESOURCE_SLICES, RESOURCE_CLAIMS),
    per=Per.POOL,
)
def pool_shared_quantity(index: ClusterIndex) -> Iterator[Row]:
    """total from sharedCounters; consumed by the devices allocated (adminAccess aside)."""
    for pool in index.pools.values():
        for (counter_set, counter), total in pool.totals.items():
            consumed = pool.consumed.get((counter_set, counter), 0.0)
            yield (pool.driver, pool.name, counter_set, counter, "total", total)
            yield (pool.driver, pool.name, counter_set, counter, "consumed", consumed)


@family(
    "kube_resourcepool_utilization_ratio",
    "How much of a resource pool is allocated, counting a partitioned device once.",
    _POOL,
    CLUSTER,
    "spec.sharedCounters, spec.devices[].consumesCounters, "
    "ResourceClaim status.allocation.devices.results[]",
    needs=(RESOURCE_SLICES, RESOURCE_CLAIMS),
    per=Per.POOL,
)
def pool_utilization(index: ClusterIndex) -> Iterator[Row]:
    """The mean use of the pool's units (see :meth:`ClusterIndex.utilization`)."""
    for pool in index.pools.values():
        ratio = index.utilization(pool)
        if ratio is not None:
            yield (pool.driver, pool.name, ratio)


@family(
    "kube_resourcepool_allocatable_devices",
    "How many more one-device claims of a DeviceClass the allocator would place in a pool.",
    (*_POOL, "node_name", "deviceclass_name"),
    CLUSTER,
    "spec.devices[] against DeviceClass selectors, spec.devices[].{taints,consumesCounters,"
    "capacity.requestPolicy}, spec.sharedCounters, ResourceClaim status.allocation, "
    "DeviceTaintRules (when listed)",
    needs=(RESOURCE_SLICES, RESOURCE_CLAIMS, DEVICE_CLASSES),
    per=Per.POOL,
    evaluates_selectors=True,
)
def pool_allocatable(index: ClusterIndex) -> Iterator[Row]:
    """First fit in the allocator's order, counters deducted as it goes (see headroom).

    With the Node view on, the fit of devices a node selector places (a multi-host pool's) is
    written on each node the selector matches, with that node's own, instead of on ``""``.
    """
    fit = allocatable if index.nodes is None else on_nodes
    for pool in index.pools.values():
        for node, deviceclass, count in fit(index, pool):
            yield (pool.driver, pool.name, node, deviceclass, count)


@family(
    "kube_resourcepool_idle_hourly_cost",
    "What the unused capacity of a resource pool would cost per hour, each device priced once.",
    (*_POOL, "node_name"),
    CLUSTER,
    "DeviceClass hourly-cost annotation and selectors, spec.sharedCounters, "
    "spec.devices[].{consumesCounters,capacity}, ResourceClaim status.allocation.devices.results[]",
    needs=(RESOURCE_SLICES, RESOURCE_CLAIMS, DEVICE_CLASSES),
    per=Per.POOL,
    evaluates_selectors=True,
)
def pool_idle_cost(index: ClusterIndex) -> Iterator[Row]:
    """Per usable pool and node with a priced device (see idlecost)."""
    for pool in index.pools.values():
        for node, cost in idle_costs(index, pool):
            yield (pool.driver, pool.name, node, cost)


@family(
    "kube_resourcepool_node_state",
    "The state of the Node a node-local pool's devices are on: ready, not_ready, "
    "unschedulable (cordoned) or absent (the Node is gone, its slices linger).",
    (*_POOL, "node_name", "state"),
    CLUSTER,
    "spec.nodeName, spec.devices[].nodeName; Node metadata.name, spec.unschedulable, Ready",
    needs=(RESOURCE_SLICES, NODES),
    per=Per.POOL,
)
def pool_node_state(index: ClusterIndex) -> Iterator[Row]:
    """One row per pool and node its devices are bound to (the Node view)."""
    nodes = index.nodes or {}
    for pool in index.pools.values():
        for name in dict.fromkeys(device.node for device in pool.devices if device.node):
            node = nodes.get(name)
            yield (pool.driver, pool.name, name, node.state if node else ABSENT, 1.0)


FAMILIES = (
    pool_generation,
    pool_slices,
    pool_complete,
    pool_state,
    pool_shared_quantity,
    pool_utilization,
    pool_idle_cost,
    pool_allocatable,
    pool_node_state,
)
