"""What a cross-object family's rows come in sets of, and which sets a change makes again.

A cross-object family's rows are made one owner at a time (a pool, a claim, a pending claim, a
pod), from a view of the index scoped to that owner alone; while only claims change, only the
sets of the owners they touched are made again.  Each kind of owner is declared once here, as
each kind of object is by its ``KindSpec``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from enum import StrEnum
from typing import Any, TypeGuard, final

import attrs

from kdraexp.allocator.facts import ClaimFacts, NodeFacts, PodFacts
from kdraexp.allocator.index import ClusterIndex


class Per(StrEnum):
    """What a cross-object family's rows come in sets of (see :data:`SCOPES`)."""

    NONE = ""
    """Not a cross-object family: its rows come from one object each."""
    POOL = "pool"
    """One set a pool (the rows function iterates ``index.pools``)."""
    CLAIM = "claim"
    """One set a claim (``index.claims``)."""
    PENDING = "pending"
    """One set a pending claim (``index.claims``): every change of a pool's use may change any of
    them, so all of them are made again when a pool's sets are."""
    POD = "pod"
    """One set a pod that matters (``index.pods``), all made again whenever one is."""
    NODE = "node"
    """One set a Node (``index.nodes``, with the Node view on), all made again whenever one
    is: what a node is served by changes with the slices, not with claims."""


@attrs.frozen
class Join:
    """One collection's join, as its sets of rows are made from it."""

    index: ClusterIndex
    claims: Mapping[str, ClaimFacts]
    """Every claim, by its key, in the order listed."""
    pending: Mapping[str, ClaimFacts]
    """The claims with pending requests, in the same order."""
    pods: Mapping[tuple[str, str], PodFacts]
    """The pods that matter, by (namespace, name), in the order listed."""
    nodes: Mapping[str, NodeFacts]
    """Every Node by name, in the order listed (none without the Node view)."""


@attrs.frozen
class Touched:
    """What a change of claims alone touched since the last collection."""

    pools: Collection[tuple[str, str]]
    """The pools whose use changed."""
    claims: Collection[str]
    """The claims whose facts changed (new, changed or gone)."""


@final
class AllChanged:
    """Slices, classes or rules changed, or nothing was made before: every set is made again."""


ALL_CHANGED = AllChanged()
"""What the sets are told in place of what a change of claims touched when all are made again."""


@attrs.frozen
class Scope:
    """One kind of owner: which there are, how a view is scoped to one, which a change touches."""

    owners: Callable[[Join], Mapping[Any, Any]]
    """Every owner of the join, by key, in the order their sets are written."""
    alone: Callable[[ClusterIndex, Any, Any], ClusterIndex]
    """A view of the index scoped to one owner (its key, itself): what the family's rows
    iterate is that owner alone."""
    touched: Callable[[Touched], Collection[Any]] | None
    """The owners a change of claims alone makes again; None: all of them, every time."""
    follows_pools: bool = False
    """Its sets read every pool's use: all of them are made again when a pool's use changes."""

    def follows(self, touched: Touched | AllChanged) -> TypeGuard[Touched]:
        """Whether the sets *touched* changes can be made again alone, the others kept."""
        return not isinstance(touched, AllChanged) and self.touched is not None

    def remade(self, touched: Touched, before: Collection[Any]) -> Collection[Any]:
        """The owners whose sets a change makes again, of those it :meth:`follows`."""
        assert self.touched is not None
        mine = self.touched(touched)
        if self.follows_pools and touched.pools:
            return {*mine, *before}
        return mine


SCOPES: Mapping[Per, Scope] = {
    Per.POOL: Scope(
        lambda join: join.index.pools, ClusterIndex.pool_alone, lambda touched: touched.pools
    ),
    Per.CLAIM: Scope(
        lambda join: join.claims, ClusterIndex.claim_alone, lambda touched: touched.claims
    ),
    Per.PENDING: Scope(
        lambda join: join.pending,
        ClusterIndex.claim_alone,
        lambda touched: touched.claims,
        follows_pools=True,
    ),
    Per.POD: Scope(lambda join: join.pods, ClusterIndex.pod_alone, None),
    Per.NODE: Scope(lambda join: join.nodes, ClusterIndex.node_alone, None),
}
"""Every kind of owner a cross-object family's rows come in sets of."""
