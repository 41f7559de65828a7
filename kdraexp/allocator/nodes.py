"""Which Nodes a pool serves, with the Node view on: what placing devices on nodes needs.

A device bound to a node (``nodeName``) serves that node; one with a node selector (its own, or
its slice's) serves the nodes it matches; one with neither (``allNodes``, a network-attached
device) serves every node.  The Nodes each selector matches and what each driver serves are
kept in the index's memo for as long as the index lasts: Nodes reading differently make the
index again (see :mod:`kdraexp.store.clusterrows`).
"""

from __future__ import annotations

import attrs

from kdraexp.allocator.facts import NodeFacts
from kdraexp.allocator.headroom import allocatable, where_fits
from kdraexp.allocator.index import ClusterIndex, Kept, Pool
from kdraexp.dra.nodeselector import NodeLabels, NodeSelector


@attrs.define
class NodeMemo(Kept):
    """Which Nodes node selectors match and drivers serve.

    Kept while the index is, as neither claims nor a collection change it.
    """

    labels: NodeLabels | None = None
    """Every Node by its labels, to answer selectors by set."""
    order: dict[str, int] = attrs.Factory(dict)
    """Every Node's place in the list: matches are written in it."""
    matched: dict[NodeSelector, tuple[str, ...]] = attrs.Factory(dict)
    """Per node selector, what :func:`matched` answered."""
    drivers: dict[str, Served] = attrs.Factory(dict)
    """Per driver, what :func:`served` answered."""


def on_nodes(index: ClusterIndex, pool: Pool) -> tuple[tuple[str, str, float], ...]:
    """(node, class, how many more fit) with the Node view: each node with what serves it.

    Devices a node selector places count on each node it matches, beside the devices bound to
    that node (per-device node selection mixes both), as the allocator selects devices one by
    one for a pod's node; devices serving every node keep the node "".  A selector matching no
    Node places its devices nowhere.
    """
    if pool.bound:
        return allocatable(index, pool)  # every device on its node: nothing to place
    found: dict[tuple[str, str], float] = {}
    for where, deviceclass, count in where_fits(index, pool):
        if where is None or isinstance(where, str):
            nodes: tuple[str, ...] = (where or "",)
        else:
            nodes = matched(index, where)
        for node in nodes:
            key = (node, deviceclass)
            found[key] = found.get(key, 0.0) + count
    return tuple([(node, deviceclass, count) for (node, deviceclass), count in found.items()])


def matched(index: ClusterIndex, selector: NodeSelector) -> tuple[str, ...]:
    """The listed Nodes *selector* matches, in the list's order (none without the Node view)."""
    memo = index.memo.of(NodeMemo)
    found = memo.matched.get(selector)
    if found is None:
        selected = selector.selected(_labels(index))
        found = memo.matched[selector] = tuple(sorted(selected, key=memo.order.__getitem__))
    return found


def _labels(index: ClusterIndex) -> NodeLabels:
    memo = index.memo.of(NodeMemo)
    if memo.labels is None:
        nodes = index.every_node or {}
        memo.labels = NodeLabels((name, node.labels) for name, node in nodes.items())
        memo.order = {name: place for place, name in enumerate(nodes)}
    return memo.labels


@attrs.frozen
class Served:
    """What the current devices of one driver serve."""

    named: frozenset[str]
    """The nodes its node-bound devices are on, or its node selectors match."""
    everywhere: bool
    """Whether a device of it serves every node (no node, no selector)."""

    def serves(self, node: NodeFacts) -> bool:
        """Whether some device of the driver serves *node*."""
        return self.everywhere or node.name in self.named


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
        for selector in selectors.values():
            named.update(matched(index, selector))
        found = drivers[driver] = Served(frozenset(named), everywhere)
    return found


def missing(index: ClusterIndex, node: NodeFacts) -> list[str]:
    """The drivers ``--expect-pools`` expects on *node* that no pool of serves there."""
    return [
        driver
        for driver, selector in index.expected
        if selector.matches(node.name, node.labels) and not served(index, driver).serves(node)
    ]
