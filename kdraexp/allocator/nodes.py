"""Which Nodes a pool serves, with the Node view on: what placing devices on nodes needs.

A device bound to a node (``nodeName``) serves that node; one with a node selector (its own, or
its slice's) serves the nodes it matches; one with neither (``allNodes``, a network-attached
device) serves every node.  What each pool and each driver serve is kept in the index's memo for
as long as the index lasts: Nodes reading differently make the index again (see
:mod:`kdraexp.store.clusterrows`).
"""

from __future__ import annotations

import attrs

from kdraexp.allocator.facts import NodeFacts
from kdraexp.allocator.index import ClusterIndex, Kept, Pool
from kdraexp.dra.nodeselector import NodeSelector


@attrs.define
class NodeMemo(Kept):
    """Which Nodes pools and drivers serve.

    Kept while the index is, as neither claims nor a collection change it.
    """

    placed: dict[tuple[str, str], tuple[str, ...] | None] = attrs.Factory(dict)
    """Per pool, what :func:`placed` answered."""
    drivers: dict[str, Served] = attrs.Factory(dict)
    """Per driver, what :func:`served` answered."""


def placed(index: ClusterIndex, pool: Pool) -> tuple[str, ...] | None:
    """The Nodes the pool's devices that are bound to no node serve, by their node selectors.

    None where such devices serve every node (one has no selector), or without the Node view:
    their fit then stays on the node ``""``.
    """
    if index.nodes is None:
        return None
    kept = index.memo.of(NodeMemo).placed
    key = (pool.driver, pool.name)
    if key in kept:
        return kept[key]
    selectors = {id(d.selector): d.selector for d in pool.devices if not d.node}
    found: tuple[str, ...] | None = None
    if selectors and None not in selectors.values():
        chosen = [s for s in selectors.values() if s is not None]
        found = tuple(
            name
            for name, node in index.nodes.items()
            if any(s.matches(name, node.labels) for s in chosen)
        )
    kept[key] = found
    return found


@attrs.frozen
class Served:
    """What the current devices of one driver serve."""

    named: frozenset[str]
    """The nodes its node-bound devices are on."""
    selectors: tuple[NodeSelector, ...]
    """The node selectors of its devices bound to no node."""
    everywhere: bool
    """Whether a device of it serves every node (no node, no selector)."""

    def serves(self, node: NodeFacts) -> bool:
        """Whether some device of the driver serves *node*."""
        return (
            self.everywhere
            or node.name in self.named
            or any(s.matches(node.name, node.labels) for s in self.selectors)
        )


def served(index: ClusterIndex, driver: str) -> Served:
    """What the current devices of *driver* serve (any of its pools)."""
    drivers = index.memo.of(NodeMemo).drivers
    found = drivers.get(driver)
    if found is None:
        named: set[str] = set()
        selectors: dict[int, NodeSelector] = {}
        everywhere = False
        for (of, _, _), device in index.devices.items():  # every pool's, whatever the view
            if of != driver:
                continue
            if device.node:
                named.add(device.node)
            elif device.selector is not None:
                selectors[id(device.selector)] = device.selector
            else:
                everywhere = True
        found = drivers[driver] = Served(frozenset(named), tuple(selectors.values()), everywhere)
    return found


def missing(index: ClusterIndex, node: NodeFacts) -> list[str]:
    """The drivers ``--expect-pools`` expects on *node* that no pool of serves there."""
    return [
        driver
        for driver, selector in index.expected
        if selector.matches(node.name, node.labels) and not served(index, driver).serves(node)
    ]
