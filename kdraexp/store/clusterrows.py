"""The cross-object families' rows, kept per pool and per claim, updated for what changed.

Device states, pool counters and utilisation come in one set of rows per pool, and claim costs in
one set per claim.  When only claims changed since the last collection (pods come and go; slices,
classes and taint rules stay), the claims that changed are found by their facts, what they
allocate is counted again, and only their own cost rows and the rows of the pools they use are
made again: a change costs what it touches, not the size of the cluster.  Anything else changed
(or the first time) makes every set again.

Each family's sets are laid out in blocks kept from one collection to the next
(:mod:`kdraexp.store.keptblocks`), so a writer keeps what it wrote for the blocks no change
touched.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

from kdraexp.allocator import (
    ALL_CHANGED,
    SCOPES,
    AllChanged,
    ClaimFacts,
    ClusterIndex,
    Inputs,
    Join,
    NodeFacts,
    PodFacts,
    Pools,
    Round,
    SelectorAnswers,
    Touched,
    pool_key,
)
from kdraexp.cel.classindex import ClassIndex
from kdraexp.dra.labelselector import LabelSelector
from kdraexp.dra.problems import Problem
from kdraexp.families.family import Family
from kdraexp.store.budget import MatcherBudget
from kdraexp.store.changes import EVERYTHING, Change, Everything, Made, many, touched_between
from kdraexp.store.keptblocks import KeptBlocks
from kdraexp.store.rows import Flat, flatten, size_for
from kdraexp.store.sharding import Shard
from kdraexp.util.turns import Turns

OWNERS_PER_TURN = 256


class Laid:
    """One family's sets of rows by owner, in the order written, and its blocks."""

    __slots__ = ("kept", "owners", "problems", "view")

    def __init__(
        self,
        owners: dict[Hashable, Flat],
        problems: dict[Hashable, tuple[Problem, ...]],
        size: int | None = None,
        width: int = 1,
        old: Laid | None = None,
        touched: Collection[Hashable] | Everything = EVERYTHING,
    ) -> None:
        """*old*'s blocks are followed for the *touched* owners (see :class:`KeptBlocks`)."""
        self.owners = owners
        """Each owner's (pool's or claim's) rows, flattened; owners without rows left out."""
        self.problems = problems
        """Each owner's problems, for the owners that have any."""
        if size is None:  # blocks of about 64 rows (a pool has a row per device)
            rows = sum(map(len, owners.values())) / width
            size = size_for(rows / len(owners) if owners else 1.0)
        self.kept: KeptBlocks = KeptBlocks.following(
            old.kept if old is not None else None, owners, _flats_of(owners), size, touched
        )
        """Kept while the owners' rows change, so that the blocks they did not touch stay."""
        self.view = self.kept.view
        """The family's blocks, () for one without rows: this collection's, unchanging."""

    @property
    def size(self) -> int:
        """The owners a block was first cut with."""
        return self.kept.size


def _flats_of(owners: dict[Hashable, Flat]) -> Callable[[Iterable[Hashable]], Iterable[Flat]]:
    return lambda keys: map(owners.__getitem__, keys)


def _owner(shard: Shard) -> Callable[[str, str], bool]:
    def owns(driver: str, pool: str) -> bool:
        return shard.owns(pool_key(driver, pool))

    return owns


class ClusterRows:
    """Every cross-object family's rows, kept between collections."""

    def __init__(self) -> None:
        self.laid: dict[str, Laid] = {}
        self.keys: dict[str, Hashable] = {}
        """Per family, the key of the rows it has."""
        self._index: ClusterIndex | None = None
        self._base: tuple[int, ...] | None = None
        """What the index was made of besides claims: slices, classes and rules versions, and
        how the Nodes read (see :meth:`_named`)."""
        self._claims: dict[str, ClaimFacts] = {}
        self._pools: Made | None = None
        """The pools, made of the slices of the version it holds (its source)."""
        self._selectors: SelectorAnswers | None = None
        self._pending: dict[str, ClaimFacts] = {}
        """The claims with pending requests, by key, in the claims' order."""
        self._pods: Made = Made(None, {})
        """The pods that matter by (namespace, name), made of the pods' facts (its source)."""
        self._nodes: Made = Made(None, None)
        """The Nodes by name, made of the Nodes' facts (its source); None without them."""
        self._nodes_read = 0
        """A number that changes whenever the Nodes read differently."""

    async def update(
        self,
        families: list[Family],
        keys: Mapping[str, Hashable],
        inputs: Inputs[Change],
        classes: ClassIndex,
        budget: MatcherBudget,
        turns: Turns,
        shard: Shard = Shard(),  # noqa: B008 - frozen
        expected: tuple[tuple[str, LabelSelector], ...] = (),
    ) -> None:
        """Make again the rows of the *families* whose key changed.

        *inputs* are what the join is made of (:func:`join_inputs`).  While the versions of the
        slices, the classes and the taint rules are the same, only claims changed and only what
        they touch is made again (unless they are many); *expected* is ``--expect-pools``.
        """
        changed = [f for f in families if self.keys.get(f.name) != keys[f.name]]
        if not changed:
            return
        claims = inputs.claims
        nodes = self._named(inputs.nodes)
        base = (*inputs.base, self._nodes_read)
        index = self._index
        self._index = None  # until the update completes: one cut short is made whole next time
        moved = touched_between(self._claims, claims, inputs.claims_changed)
        touched: Touched | AllChanged = ALL_CHANGED
        if index is None or base != self._base or many(len(moved), len(claims)):
            index = await self._index_of(inputs, classes, turns)
            self._pending = {key: claim for key, claim in claims.items() if claim.pending}
        else:
            touched = await self._follow(index, claims, moved, turns)
            self._follow_pending(claims, touched.claims)
        pods = self._begin(index, inputs, classes, budget, nodes, shard, expected)
        join = Join(index, claims, self._pending, pods, nodes or {})
        for family in changed:
            self.laid[family.name] = await self._lay(family, join, touched, turns)
            self.keys[family.name] = keys[family.name]
        self._index, self._base, self._claims = index, base, claims

    async def _index_of(
        self, inputs: Inputs[Change], classes: ClassIndex, turns: Turns
    ) -> ClusterIndex:
        """The index made anew of *inputs*, of the pools of before while the slices are."""
        if self._pools is None or self._pools.source != inputs.base[0]:
            self._pools = Made(inputs.base[0], await Pools.build(inputs.slices, turns))
        return await ClusterIndex.build(
            self._pools.made,
            list(inputs.claims.values()),
            classes.costs,
            inputs.rules,
            frozenset(classes.entries),
            turns,
        )

    def _begin(
        self,
        index: ClusterIndex,
        inputs: Inputs[Change],
        classes: ClassIndex,
        budget: MatcherBudget,
        nodes: dict[str, NodeFacts] | None,
        shard: Shard,
        expected: tuple[tuple[str, LabelSelector], ...],
    ) -> dict[tuple[str, str], PodFacts]:
        """Begin the collection on *index*: its selectors, pods and Nodes; the pods."""
        self._selectors = budget.own_selectors(
            self._selectors,
            classes,
            {
                (r.deviceclass, r.selectors): len(index.by_class.get(r.deviceclass, ()))
                for c in self._pending.values()
                for r in c.pending
                if r.selectors
            },
        )
        if self._pods.source is not inputs.pods:
            matter = [pod for pod in inputs.pods.values() if pod is not None]
            self._pods = Made(inputs.pods, {(pod.namespace, pod.name): pod for pod in matter})
        pods: dict[tuple[str, str], PodFacts] = self._pods.made
        index.begin(
            Round(
                self._selectors,
                _owner(shard),
                list(pods.values()),
                classes.extended,
                nodes,
                expected,
            )
        )
        return pods

    def _named(self, listed: Mapping[str, NodeFacts] | None) -> dict[str, NodeFacts] | None:
        """The Nodes by name: the mapping of before while they are equal, new ones read alike.

        A Node's status is written every few minutes whatever happens (its heartbeat), so its
        entry is read again; what the join reads of it (labels, state) rarely changes, and a
        change of it makes the whole index again (it places pools on nodes).
        """
        if self._nodes.source is listed:
            found: dict[str, NodeFacts] | None = self._nodes.made
            return found
        named = None if listed is None else {node.name: node for node in listed.values()}
        if named is not None and named == self._nodes.made:
            named = self._nodes.made
        else:
            self._nodes_read += 1
        self._nodes = Made(listed, named)
        return named

    async def _follow(
        self,
        index: ClusterIndex,
        claims: dict[str, ClaimFacts],
        moved: Collection[str],
        turns: Turns,
    ) -> Touched:
        """Bring the index up to *claims*, those *moved* new: the pools and claims it changed."""
        pools = index.follow(self._claims, claims, moved)
        for count, touched in enumerate(pools):
            pool = index.pools.get(touched)
            if pool is not None:
                index.consume(pool)
            if count % OWNERS_PER_TURN == OWNERS_PER_TURN - 1:
                await turns.take()
        return Touched(pools, moved)

    def _follow_pending(self, claims: dict[str, ClaimFacts], moved: Collection[str]) -> None:
        """Keep the pending claims in the claims' order: a new one puts them in order again."""
        pending = self._pending
        for key in moved:
            claim = claims.get(key)
            if claim is None or not claim.pending:
                pending.pop(key, None)
            elif key in pending:
                pending[key] = claim  # keeps its place
            else:
                self._pending = {k: c for k, c in claims.items() if c.pending}
                return

    async def _lay(
        self, family: Family, join: Join, touched: Touched | AllChanged, turns: Turns
    ) -> Laid:
        """The family's sets: all made, or only those of the owners *touched* changed."""
        scope = SCOPES[family.per]
        everyone = scope.owners(join)
        old = self.laid.get(family.name)
        size: int | None = None
        owners: dict[Any, Flat]
        problems: dict[Any, tuple[Problem, ...]]
        made: Iterable[Any]
        if old is None or not scope.follows(touched):  # every set made again
            made, owners, problems = list(everyone), {}, {}
        else:
            made, owners, problems = (
                scope.remade(touched, old.owners),
                dict(old.owners),
                dict(old.problems),
            )
            size = old.size
        added = False
        remade: set[Any] = set()
        """The owners whose rows are not what they were (a set made again alike is kept)."""
        for count, owner in enumerate(made):
            one = everyone.get(owner)
            if one is None:
                if owners.pop(owner, None) is not None:
                    remade.add(owner)
                problems.pop(owner, None)
                continue
            view = scope.alone(join.index, owner, one)
            flat = flatten(family.rows(view))
            was = owners.get(owner)
            if flat:
                if flat != was:
                    added = added or was is None
                    owners[owner] = flat
                    remade.add(owner)
            elif was is not None:
                del owners[owner]
                remade.add(owner)
            if view.problems.found:
                problems[owner] = tuple(view.problems.found)
            else:
                problems.pop(owner, None)
            if count % OWNERS_PER_TURN == OWNERS_PER_TURN - 1:
                await turns.take()
        if added and size is not None:  # new owners go where a fresh collection puts them
            placed = list(filter(owners.__contains__, everyone))
            owners = dict(zip(placed, map(owners.__getitem__, placed), strict=True))
        following = old if size is not None else None
        width = len(family.labels) + 1
        return Laid(owners, problems, size, width, following, remade if following else EVERYTHING)
