"""The Node view, written when ``--resources`` names ``nodes``: which nodes the pools serve.

A pool published with a node selector serves the nodes it matches, which only the Nodes' labels
say; a node-local pool is worth what its node is (ready, cordoned, gone).  Each Node leaves its
name, labels and state for the join (see :mod:`kdraexp.families.resourcepool`), and its one
family, ``kube_node_dra_pool_missing``, names the drivers ``--expect-pools`` expects on it that
no pool serves.  Only those fields are decoded.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import MappingProxyType

from kdraexp.allocator.facts import NodeFacts
from kdraexp.allocator.index import ClusterIndex
from kdraexp.allocator.nodes import missing
from kdraexp.allocator.scopes import Per
from kdraexp.dra import wire
from kdraexp.dra.listing import NODES, RESOURCE_SLICES
from kdraexp.families.context import Context
from kdraexp.families.family import CLUSTER, Row, family
from kdraexp.families.kind import KindSpec

READY, NOT_READY, UNSCHEDULABLE, ABSENT = "ready", "not_ready", "unschedulable", "absent"
"""A node-local pool's node states (kube_resourcepool_node_state), ``absent``: no such Node."""


class NodeView:
    """One Node, read once: its facts."""

    __slots__ = ("facts",)

    def __init__(self, item: wire.Node, context: Context) -> None:
        meta = item.metadata or wire.NodeMeta()
        spec = item.spec or wire.NodeSpec()
        conditions = (item.status or wire.NodeStatus()).conditions or ()
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        state = NOT_READY if not ready else UNSCHEDULABLE if spec.unschedulable is True else READY
        labels = {sys.intern(k): sys.intern(v) for k, v in (meta.labels or {}).items()}
        self.facts = NodeFacts(meta.name or "", MappingProxyType(labels), state)


@family(
    "kube_node_dra_pool_missing",
    "1 for each Node an --expect-pools selector matches that no pool of the driver serves.",
    ("node_name", "driver"),
    CLUSTER,
    "Node metadata.{name,labels}; ResourceSlice spec.{driver,nodeName,nodeSelector,allNodes}, "
    "spec.devices[].{nodeName,nodeSelector,allNodes}",
    needs=(NODES, RESOURCE_SLICES),
    per=Per.NODE,
    whole_cluster="a shard does not see every pool",
)
def pool_missing(index: ClusterIndex) -> Iterator[Row]:
    """Per Node, each driver expected there that none of its pools' current devices serve."""
    for node in (index.nodes or {}).values():
        for driver in missing(index, node):
            yield (node.name, driver, 1.0)


FAMILIES = (pool_missing,)


def _node_facts(view: NodeView, written: bool) -> NodeFacts:
    return view.facts


KIND = KindSpec(NODES, NodeView, _node_facts)
