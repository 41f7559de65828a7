"""Whether a request the devices could meet can be met where its pods may run (the Node view).

A request judged ``feasible`` may still wait for ever: its free devices are bound to nodes, or
placed by node selectors on nodes, where none of the pods using the claim may run (a pod pinned
by ``nodeName``, ``nodeSelector`` or required node affinity elsewhere).  Judged only with the
Nodes listed (their labels say where selectors place devices and which nodes pods may use) and
the pods listed (which pods wait on the claim).
"""

from __future__ import annotations

from collections.abc import Collection

import attrs

from kdraexp.allocator.candidates import free_devices
from kdraexp.allocator.facts import ClaimFacts, NodeFacts, PodFacts, RequestFacts
from kdraexp.allocator.index import ClusterIndex, Kept
from kdraexp.allocator.nodes import matched
from kdraexp.dra.nodeselector import NodeSelector


@attrs.define
class ReachMemo(Kept):
    """The pods not bound yet, by the claims they use: made when first asked, each collection."""

    waiting: dict[tuple[str, str], list[PodFacts]] | None = None

    def begin(self) -> None:
        """The pods are the new collection's."""
        self.waiting = None


def waiting(index: ClusterIndex, claim: ClaimFacts) -> list[PodFacts]:
    """The pods not bound yet that use *claim* (named, or made for them from a template)."""
    memo = index.memo.of(ReachMemo)
    found = memo.waiting
    if found is None:
        found = memo.waiting = {}
        for pod in index.pods:
            if not pod.bound:
                for _, name in pod.claims:
                    found.setdefault((pod.namespace, name), []).append(pod)
    return found.get(
        (claim.labels.value("namespace"), claim.labels.value("resourceclaim_name")), []
    )


def allowed(nodes: Collection[NodeFacts], pods: list[PodFacts]) -> list[NodeFacts]:
    """The *nodes* some of *pods* may run on."""
    return [
        node
        for node in nodes
        if any(pod.placement is None or pod.placement.allows(node) for pod in pods)
    ]


def reachable(index: ClusterIndex, request: RequestFacts, nodes: list[NodeFacts]) -> bool:
    """Whether one of *nodes* has free devices enough for *request*.

    A device bound to a node counts there, one a node selector places on the nodes it matches,
    one with neither on every node.  Shared counters are not deducted: ``feasible`` said that
    much fits on some node already.
    """
    counts = dict.fromkeys((node.name for node in nodes), 0)
    everywhere = 0
    placed: dict[NodeSelector, int] = {}
    for _, device in free_devices(index, request):
        if device.node:
            if device.node in counts:
                counts[device.node] += 1
        elif device.selector is not None:
            placed[device.selector] = placed.get(device.selector, 0) + 1
        else:
            everywhere += 1
    for selector, count in placed.items():
        for name in matched(index, selector):
            if name in counts:
                counts[name] += count
    return any(count + everywhere >= request.count for count in counts.values())
