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
    ClaimFacts,
    ClusterIndex,
    Pools,
    Round,
    RuleFacts,
    SelectorAnswers,
    SliceFacts,
)
from kdraexp.cel.classindex import ClassIndex
from kdraexp.dra.listing import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from kdraexp.dra.problems import Problem, Problems
from kdraexp.families.family import Family, Per
from kdraexp.families.resourceslice import pool_key
from kdraexp.store.changes import Change, Made, touched_between
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
        touched: Collection[Hashable] | None = None,
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


CLUSTER_NEEDS = frozenset({DEVICE_TAINT_RULES.plural})
"""What every cross-object family's key includes besides its needs: taint rules change device
states, though a family is written without them."""
_BASE = (RESOURCE_SLICES, DEVICE_CLASSES, DEVICE_TAINT_RULES)
"""The kinds whose change makes the whole index again (claims are followed one by one)."""


_SCOPES: dict[Per, Callable[[ClusterIndex, Any, Any], None]] = {
    Per.POOL: ClusterIndex.only_pool,
    Per.CLAIM: lambda view, _, claim: view.only_claim(claim),
    Per.PENDING: lambda view, _, claim: view.only_claim(claim),
    Per.POD: lambda view, _, pod: view.only_pod(pod),
}
"""Per kind of owner, how a view of the index is scoped to one (its key, itself)."""


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
        """What the index was made of besides claims: slices, classes and rules versions."""
        self._claims: dict[str, ClaimFacts] = {}
        self._pools: Made | None = None
        """The pools, made of the slices of the version it holds (its source)."""
        self._selectors: SelectorAnswers | None = None
        self._pending: dict[str, ClaimFacts] = {}
        """The claims with pending requests, by key."""
        self._pods: dict[tuple[str, str], Any] = {}
        """The pods that matter by (namespace, name): the owners of the per-pod families."""

    async def update(
        self,
        families: list[Family],
        keys: Mapping[str, Hashable],
        versions: Mapping[str, int],
        facts: Mapping[str, dict[str, Any]],
        classes: ClassIndex,
        turns: Turns,
        shard: Shard = Shard(),  # noqa: B008 - frozen
        changed_facts: Mapping[str, Change] | None = None,
    ) -> None:
        """Make again the rows of the *families* whose key changed.

        *versions* and *facts* are per resource, the facts per object: this is the one place
        that joins the kinds.  While the versions of the slices, the classes and the taint rules
        are the same, only claims changed and only what they touch is made again;
        *changed_facts* may say which, per resource (see :func:`touched_between`).
        """
        changed = [f for f in families if self.keys.get(f.name) != keys[f.name]]
        if not changed:
            return
        base = tuple(versions.get(kind.plural, 0) for kind in _BASE)
        slices: list[SliceFacts] = list(facts.get(RESOURCE_SLICES.plural, {}).values())
        claims: dict[str, ClaimFacts] = facts.get(RESOURCE_CLAIMS.plural, {})
        rules: list[RuleFacts] = list(facts.get(DEVICE_TAINT_RULES.plural, {}).values())
        index = self._index
        self._index = None  # until the update completes: one cut short is made whole next time
        if index is None or base != self._base:
            if self._pools is None or self._pools.source != base[0]:
                self._pools = Made(base[0], await Pools.build(slices, turns))
            index = await ClusterIndex.build(
                slices,
                list(claims.values()),
                classes.costs,
                Problems(),
                rules,
                turns,
                self._pools.made,
                frozenset(classes.entries),
            )
            pools: Iterable[tuple[str, str]] | None = None
            moved: Iterable[str] | None = None
            self._pending = {key: claim for key, claim in claims.items() if claim.pending}
        else:
            known = (changed_facts or {}).get(RESOURCE_CLAIMS.plural)
            pools, moved = await self._follow(index, claims, turns, known)
            for key in moved:
                claim = claims.get(key)
                if claim is not None and claim.pending:
                    self._pending[key] = claim
                else:
                    self._pending.pop(key, None)
        if self._selectors is None or self._selectors.matcher is not classes.matcher:
            self._selectors = SelectorAnswers(classes.matcher)
        self._selectors.new_collection(
            {
                (r.deviceclass, r.selectors): len(index.by_class.get(r.deviceclass, ()))
                for c in self._pending.values()
                for r in c.pending
                if r.selectors
            }
        )
        pods = None
        if any(family.per is Per.POD for family in changed):
            pods = [pod for pod in facts.get(PODS.plural, {}).values() if pod is not None]
            self._pods = {(pod.namespace, pod.name): pod for pod in pods}
        index.begin(
            Round(list(claims.values()), self._selectors, _owner(shard), pods, classes.extended)
        )
        for family in changed:
            self.laid[family.name] = await self._lay(family, index, claims, pools, moved, turns)
            self.keys[family.name] = keys[family.name]
        self._index, self._base, self._claims = index, base, claims

    async def _follow(
        self,
        index: ClusterIndex,
        claims: dict[str, ClaimFacts],
        turns: Turns,
        known: Change | None,
    ) -> tuple[set[tuple[str, str]], set[str]]:
        """Bring the index up to *claims*: the pools and claims whose rows change."""
        before = self._claims
        moved = set(touched_between(before, claims, known))  # a claim's facts are new
        pools: set[tuple[str, str]] = set()
        for key in moved:
            if key in before:
                pools |= index.allocate(before[key], -1)
            if key in claims:
                pools |= index.allocate(claims[key], 1)
        for count, touched in enumerate(pools):
            pool = index.pools.get(touched)
            if pool is not None:
                index.consume(pool)
            if count % OWNERS_PER_TURN == OWNERS_PER_TURN - 1:
                await turns.take()
        return pools, moved

    async def _lay(
        self,
        family: Family,
        index: ClusterIndex,
        claims: dict[str, ClaimFacts],
        pools: Iterable[tuple[str, str]] | None,
        moved: Iterable[str] | None,
        turns: Turns,
    ) -> Laid:
        """The family's sets: all made (*pools* and *moved* None), or those of the ones given."""
        view = index.view()
        view.problems = Problems()
        scope = _SCOPES[family.per]
        everyone: Mapping[Any, Any] = index.pools if family.per is Per.POOL else claims
        old = self.laid.get(family.name)
        given: Iterable[Any] | None = pools if family.per is Per.POOL else moved
        if family.per is Per.POD:  # few pods matter, and their rows join claims: all made again
            everyone, given = self._pods, None
        if family.per is Per.PENDING and pools and moved is not None and old is not None:
            given = {*moved, *old.owners}  # the pending read the pools that changed
        size: int | None = None
        touched: Iterable[Any]
        if given is None or old is None:  # every set made again
            touched, owners, problems = list(everyone), {}, {}
            if family.per is Per.PENDING:  # the others have no rows
                touched = [key for key, claim in claims.items() if claim.pending]
        else:
            touched, owners, problems = given, dict(old.owners), dict(old.problems)
            size = old.size
        added = False
        remade: set[Any] = set()
        """The owners whose rows are not what they were (a set made again alike is kept)."""
        for count, owner in enumerate(touched):
            one = everyone.get(owner)
            if one is None:
                if owners.pop(owner, None) is not None:
                    remade.add(owner)
                problems.pop(owner, None)
                continue
            scope(view, owner, one)
            found = len(view.problems.found)
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
            if len(view.problems.found) > found:
                problems[owner] = tuple(view.problems.found[found:])
            else:
                problems.pop(owner, None)
            if count % OWNERS_PER_TURN == OWNERS_PER_TURN - 1:
                await turns.take()
        if added and size is not None:  # new owners go where a fresh collection puts them
            placed = list(filter(owners.__contains__, everyone))
            owners = dict(zip(placed, map(owners.__getitem__, placed), strict=True))
        following = old if size is not None else None
        width = len(family.labels) + 1
        return Laid(owners, problems, size, width, following, remade if following else None)
