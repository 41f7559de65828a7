"""What needs every listed object at once: pools, device states, counters, utilisation, cost.

While pages are read, each slice and claim leaves a few facts behind (its pool and generation, its
devices' taints and counter needs, its allocation results); this module joins them once the lists
are complete.  A pool is ``(driver, pool)``; its current generation is the highest
``spec.pool.generation`` among its slices, and only slices of that generation count.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Protocol, TypeVar, cast

import attrs
import msgspec

from kdraexp.allocator.facts import (
    TOLERANCE,
    ClaimFacts,
    DeviceFacts,
    NodeFacts,
    PodFacts,
    ResultFacts,
    RuleFacts,
    SliceFacts,
)
from kdraexp.dra.gated import kept
from kdraexp.dra.labelselector import LabelSelector
from kdraexp.dra.problems import Problems
from kdraexp.util.labels import GroupValues
from kdraexp.util.turns import Turns

USABLE, INCOMPLETE, INVALID = "usable", "incomplete", "invalid"
"""A pool's states, in the allocator's terms (kube_resourcepool_state)."""
HOURLY_COST = "hourly-cost"
"""Where a cost summed past float64 is counted: the DeviceClass annotation that priced it."""
_NO_RULES: Mapping[str, list[RuleFacts]] = MappingProxyType({})
"""What selects a pool's devices when no taint rule is listed (one read-only mapping for all)."""
_PLACEMENT = re.compile(r"\d+$")
"""A counter named with a trailing number is one of a placement group (``memory-slice-3``)."""
_NAME = operator.attrgetter("name")


class CostSum:
    """What devices cost together: each price times the shares used of it, summed exactly.

    A price is the decimal its annotation wrote (the shortest decimal that reads back as the
    float: that decimal, for a price of at most 15 significant digits), a share the exact value
    of its float, or of the ratio of two (a capacity consumed of a capacity).  The sum is exact,
    then rounded to a float once: three partitions at 0.60 cost 1.8, where adding 0.6 three
    times gives 1.7999999999999998.  Whole devices are counted, other shares added as fractions.
    """

    __slots__ = ("_parts", "_whole")

    def __init__(self) -> None:
        self._whole: dict[float, int] = {}
        """Per price, the whole devices."""
        self._parts: dict[float, tuple[int, int]] = {}
        """Per price, the other shares summed: a numerator and a denominator."""

    def add(self, price: float, share: float = 1.0, of: float = 1.0) -> None:
        """Add *share* of *of* of a device at *price* (1 of 1: the whole device)."""
        if share == of:
            self._whole[price] = self._whole.get(price, 0) + 1
        elif share:
            top, bottom = share.as_integer_ratio()
            whole, parts = of.as_integer_ratio()
            top, bottom = top * parts, bottom * whole
            summed, per = self._parts.get(price, (0, 1))
            self._parts[price] = (summed * bottom + top * per, per * bottom)

    def total(self) -> float:
        """The sum, rounded once (0 for no share); ``inf`` past the largest float64."""
        whole, parts = self._whole, self._parts
        if not parts and len(whole) == 1:
            ((price, count),) = whole.items()
            if count == 1:
                return price  # one whole device: its price
        numerator, denominator = 0, 1
        for price in {*whole, *parts}:
            summed, per = parts.get(price, (0, 1))
            written, scale = _decimal(price)
            this, by = written * (whole.get(price, 0) * per + summed), scale * per
            numerator, denominator = numerator * by + this * denominator, denominator * by
        try:
            return numerator / denominator
        except OverflowError:
            return math.inf


def _decimal(price: float) -> tuple[int, int]:
    """*price* as the decimal it reads as: (numerator, denominator)."""
    text = repr(price)
    whole, _, fraction = text.partition(".")
    if whole.isdigit() and fraction.isdigit():
        return int(whole + fraction), 10 ** len(fraction)
    return Fraction(text).as_integer_ratio()  # 1e+300, 1.5e-05


class Pool(msgspec.Struct, gc=False, eq=False):
    """One pool's current generation: its slices, devices, counters and how much is used.

    Untracked, as the facts are (:mod:`.facts` says why): a 64,000-device index pairs each device
    with its pool, and a tracked pool kept those pairs tracked too.  Equal by identity only.
    """

    driver: str
    name: str
    slices: tuple[SliceFacts, ...] = ()
    """Tuples, not lists, here and below: what holds only untracked objects is untracked too."""
    current: tuple[SliceFacts, ...] = ()
    """The slices of the current generation."""
    generation: int = 0
    expected: int | None = None
    published: int = 0
    stale: int = 0
    devices: tuple[DeviceFacts, ...] = ()
    totals: dict[tuple[str, str], float] = msgspec.field(default_factory=dict)
    sets: dict[str, tuple[tuple[str, float], ...]] = msgspec.field(default_factory=dict)
    """Per counter set, its counters with a positive total: (counter, total)."""
    consumed: dict[tuple[str, str], float] = msgspec.field(default_factory=dict)
    state: str = USABLE
    most: tuple[tuple[str, str, float], ...] | None = None
    """Per node and class, how many devices fit together with nothing in use (see
    :func:`kdraexp.allocator.headroom.capacity`): kept while the slices do not change."""
    bound: bool = True
    """Whether every device is bound to a node: none a node selector places, none serving
    every node (see :func:`kdraexp.allocator.headroom.where_fits`)."""

    def settle(self) -> None:
        """Keep the current generation only; add up its counters."""
        self.generation = max(s.generation for s in self.slices)
        current = sorted(  # the allocator walks a pool's slices by name
            [s for s in self.slices if s.generation == self.generation], key=_NAME
        )
        self.current = tuple(current)
        self.published = len(current)
        self.stale = len(self.slices) - len(current)
        counts = [s.slice_count for s in current if s.slice_count is not None]
        self.expected = max(counts) if counts else None
        sets: list[str] = []
        self.devices = tuple(itertools.chain.from_iterable(facts.devices for facts in current))
        self.bound = all(device.node for device in self.devices)
        for facts in current:
            for counter_set, counters in facts.shared:
                sets.append(counter_set)
                for counter, value in counters.items():
                    self.totals.setdefault((counter_set, counter), value)
        counted: dict[str, list[tuple[str, float]]] = {}
        for (counter_set, counter), total in self.totals.items():
            known = counted.setdefault(counter_set, [])
            if total > 0:
                known.append((counter, total))
        self.sets = {counter_set: tuple(known) for counter_set, known in counted.items()}
        self.state = self._judged(sets)

    def _judged(self, sets: list[str]) -> str:
        """The allocator's verdict: it never validates a pool it will not use (incomplete)."""
        if self.expected is None or self.published != self.expected:
            return INCOMPLETE
        names = [device.name for device in self.devices]
        if len(set(names)) != len(names) or len(set(sets)) != len(sets):
            return INVALID
        for device in self.devices:
            for counter_set, counters in device.consumes:
                if any((counter_set, counter) not in self.totals for counter in counters):
                    return INVALID  # a set or counter the pool does not define
                if not counters and counter_set not in sets:
                    return INVALID
        return USABLE


class Pools:
    """The pools of a list of slices, and their devices: kept while the slices do not change."""

    def __init__(self) -> None:
        self.pools: dict[tuple[str, str], Pool] = {}
        self.devices: dict[tuple[str, str, str], DeviceFacts] = {}
        self.by_class: dict[str, list[tuple[Pool, DeviceFacts]]] = {}
        """Per DeviceClass, the current devices it selects, each (driver, pool, name) once."""
        self.unsure: set[str] = set()
        """The classes whose match with some current device could not be decided."""
        self.pools_by_class: dict[str, dict[tuple[str, str], Pool]] = {}
        """Per DeviceClass, the pools with a current device it selects."""

    @classmethod
    async def build(cls, slices: list[SliceFacts], turns: Turns) -> Pools:
        """Group *slices* by pool, keeping each pool's current generation."""
        made = cls()
        grouped: dict[tuple[str, str], list[SliceFacts]] = {}
        for facts in slices:
            grouped.setdefault((facts.driver, facts.pool), []).append(facts)
        made.pools = {key: Pool(*key, slices=tuple(found)) for key, found in grouped.items()}
        del grouped
        await turns.take()
        for count, pool in enumerate(made.pools.values()):
            pool.settle()
            for device in pool.devices:
                named = (pool.driver, pool.name, device.name)
                if named in made.devices:
                    continue
                made.devices[named] = device
                for deviceclass in device.classes:
                    made.by_class.setdefault(deviceclass, []).append((pool, device))
                    made.pools_by_class.setdefault(deviceclass, {})[(pool.driver, pool.name)] = pool
                made.unsure.update(device.unsure)
            if count % 256 == 0:
                await turns.take()
        return made


class OwnSelectors(Protocol):
    """Claims' own selectors answered on a class's devices (:mod:`.answers` gives them)."""

    def answers(
        self, deviceclass: str, selectors: tuple[str, ...], pools: list[Pool]
    ) -> dict[int, dict[str, bool | str]] | None:
        """Per pool (by ``id``), its devices of the class that match, or why not known.

        None when the collection's budget ran out first.
        """


@attrs.frozen
class Round:
    """What a collection gives the join besides its slices, classes and rules.

    One record, taken whole by :meth:`ClusterIndex.begin` before any family reads the index.
    The claims are not in it: the index has them as it allocated them (:meth:`ClusterIndex.build`
    and :meth:`ClusterIndex.follow`).
    """

    selectors: OwnSelectors | None
    """Claims' own selectors' answers."""
    owns: Callable[[str, str], bool]
    """Whether the pool (driver, pool) is this shard's."""
    pods: list[PodFacts] = attrs.field(factory=list)
    """The pods that matter (none unless pods are listed)."""
    extended: Mapping[str, str] = MappingProxyType({})
    """Extended resource name -> the DeviceClass that serves it (read with the pods)."""
    nodes: Mapping[str, NodeFacts] | None = None
    """Every Node by name; None when Nodes are not listed (the Node view is off)."""
    expected: tuple[tuple[str, LabelSelector], ...] = ()
    """``--expect-pools``: (driver, the nodes a pool of it should serve)."""


class Kept:
    """What one module of answers keeps of the index, typed by that module.

    Registered with the :class:`Memo` by its class (``index.memo.of(PendingMemo)``), so the index
    knows nothing of the modules above it.  Each says what it forgets when a pool's use changes
    and when a new collection begins; by default, nothing.
    """

    def consume(self, key: tuple[str, str]) -> None:
        """The pool *key*'s use changed: forget what was kept of it."""

    def begin(self) -> None:
        """A new collection: forget what was kept of the last one's claims."""


K = TypeVar("K", bound=Kept)


@attrs.define
class Memo:
    """What the index and the families' answers keep of it, shared by every view of it.

    Per pool, kept until its use changes (:meth:`ClusterIndex.consume` forgets the pool's);
    per collection, forgotten when the next one begins (:meth:`ClusterIndex.begin`).  The index's
    own memos are fields; each module of answers keeps its own :class:`Kept`, asked for by
    :meth:`of`.
    """

    states: dict[tuple[str, str], list[str]] = attrs.Factory(dict)
    """Per pool, its devices' states (see :meth:`ClusterIndex.states`)."""
    claims_by_name: dict[tuple[str, str], ClaimFacts] | None = None
    """Every claim by (namespace, name), for the pods that name them: made when first asked."""
    _kept: dict[type[Kept], Kept] = attrs.Factory(dict)
    """Each module's memo, by its class."""

    def of(self, kind: type[K]) -> K:
        """The memo of class *kind*, made empty when first asked for."""
        found = self._kept.get(kind)
        if found is None:
            found = self._kept[kind] = kind()
        return cast(K, found)  # registered under its own class

    def consume(self, key: tuple[str, str]) -> None:
        """The pool *key*'s use changed: forget what was kept of it."""
        self.states.pop(key, None)
        for memo in self._kept.values():
            memo.consume(key)

    def begin(self) -> None:
        """A new collection: what was judged of the last one's claims may no longer hold."""
        self.claims_by_name = None
        for memo in self._kept.values():
            memo.begin()


class ClusterIndex:
    """The join of one collection's slices and claims.

    Made by :meth:`build`, which gives the reactor its turns: at 64,000 devices the join takes
    a few hundred milliseconds.  Each collection then begins with :meth:`begin`; a family reads
    it through a view scoped to one owner at a time (:meth:`pool_alone` and the others).
    """

    def __init__(
        self,
        claims: list[ClaimFacts],
        costs: dict[str, float],
        problems: Problems,
        rules: list[RuleFacts] | None = None,
        classes: frozenset[str] = frozenset(),
    ) -> None:
        self.pools: dict[tuple[str, str], Pool] = {}
        self.devices: dict[tuple[str, str, str], DeviceFacts] = {}
        self.claims = claims
        self.costs = costs
        self.problems = problems
        self.rules = [rule for rule in rules or () if rule is not None]
        """Every taint rule with a known effect."""
        self._ruled: dict[tuple[str, str], dict[str, list[RuleFacts]]] = {}
        """Per pool, per device name, the rules that select it (see :meth:`ruled`)."""
        self.classes = classes
        """The names of the DeviceClasses listed."""
        self.by_class: dict[str, list[tuple[Pool, DeviceFacts]]] = {}
        self.pools_by_class: dict[str, dict[tuple[str, str], Pool]] = {}
        self.unsure: set[str] = set()
        self.memo = Memo()
        self.owns: Callable[[str, str], bool] = _everything
        """Whether the pool (driver, pool) is this shard's (always, unsharded)."""
        self.selectors: OwnSelectors | None = None
        """Claims' own selectors' answers."""
        self.allocated: dict[tuple[str, str, str], int] = {}
        """The devices allocated (adminAccess aside), with the number of claims allocated each."""
        self.consumed: dict[tuple[str, str, str], dict[str, float]] = {}
        """Per shareable device, what its allocations consume of each capacity."""
        self.pods: list[PodFacts] = []
        """The pods that matter."""
        self.extended: Mapping[str, str] = MappingProxyType({})
        """Extended resource name -> the DeviceClass that serves it."""
        self.nodes: Mapping[str, NodeFacts] | None = None
        """Every Node by name; None when Nodes are not listed (the Node view is off)."""
        self.every_node: Mapping[str, NodeFacts] | None = None
        """:attr:`nodes`, whatever the view (:meth:`node_alone`'s narrows :attr:`nodes`)."""
        self.expected: tuple[tuple[str, LabelSelector], ...] = ()
        """``--expect-pools``: (driver, the nodes a pool of it should serve)."""

    def begin(self, round_: Round) -> None:
        """A collection's own inputs; what was judged of the last one's claims is forgotten."""
        self.selectors = round_.selectors
        self.owns = round_.owns
        self.pods = round_.pods
        self.extended = round_.extended
        self.nodes = self.every_node = round_.nodes
        self.expected = round_.expected
        self.memo.begin()

    def pool_alone(self, key: tuple[str, str], pool: Pool) -> ClusterIndex:
        """A view of *pool* alone: a family iterating ``pools`` makes that pool's rows."""
        return self._scoped("pools", {key: pool})

    def claim_alone(self, key: str, claim: ClaimFacts) -> ClusterIndex:
        """A view of *claim* alone: a family iterating ``claims`` makes its rows."""
        return self._scoped("claims", [claim])

    def pod_alone(self, key: tuple[str, str], pod: PodFacts) -> ClusterIndex:
        """A view of *pod* alone: a family iterating ``pods`` makes its rows."""
        return self._scoped("pods", [pod])

    def node_alone(self, key: str, node: NodeFacts) -> ClusterIndex:
        """A view of *node* alone: a family iterating ``nodes`` makes its rows."""
        return self._scoped("nodes", {key: node})

    def _scoped(self, name: str, owners: object) -> ClusterIndex:
        """A new view sharing everything with this index but *name* and its own problems.

        What a view keeps goes to the shared :attr:`memo`.  Made field by field rather than by
        :func:`copy.copy`, four times as slow: a collection at start makes one a family and owner.
        """
        view = ClusterIndex.__new__(ClusterIndex)
        fields = self.__dict__.copy()
        fields[name] = owners
        fields["problems"] = Problems()
        view.__dict__ = fields
        return view

    def claim_named(self, namespace: str, name: str) -> ClaimFacts | None:
        """The claim *namespace*/*name*, if listed (for the pods that name claims)."""
        found = self.memo.claims_by_name
        if found is None:
            found = self.memo.claims_by_name = {
                (claim.labels.value("namespace"), claim.labels.value("resourceclaim_name")): claim
                for claim in self.claims
            }
        return found.get((namespace, name))

    @classmethod
    async def build(
        cls,
        pools: Pools,
        claims: list[ClaimFacts],
        costs: dict[str, float],
        rules: list[RuleFacts] | None = None,
        classes: frozenset[str] = frozenset(),
        turns: Turns | None = None,
    ) -> ClusterIndex:
        """Join *pools* (made of the slices) and *claims*, yielding to the reactor between steps.

        The pools are shared with the last index of the same slices; what claims consume is not.
        """
        turns = turns or Turns.never()
        index = cls(claims, costs, Problems(), rules, classes)
        index.pools, index.devices = pools.pools, pools.devices
        index.by_class, index.unsure = pools.by_class, pools.unsure
        index.pools_by_class = pools.pools_by_class
        for count, claim in enumerate(claims):
            index.allocate(claim, 1)
            if count % 1024 == 0:
                await turns.take()
        for count, pool in enumerate(index.pools.values()):
            index.consume(pool)
            if count % 256 == 0:
                await turns.take()
        return index

    def follow(
        self,
        before: Mapping[str, ClaimFacts],
        claims: Mapping[str, ClaimFacts],
        moved: Iterable[str],
    ) -> set[tuple[str, str]]:
        """Claims *before* become *claims*, those *moved* allocated again: the pools they use.

        What the pools consume is not added up again here (:meth:`consume`, pool by pool).
        """
        pools: set[tuple[str, str]] = set()
        for key in moved:
            if key in before:
                pools |= self.allocate(before[key], -1)
            if key in claims:
                pools |= self.allocate(claims[key], 1)
        self.claims = list(claims.values())
        return pools

    def allocate(self, claim: ClaimFacts, by: int) -> set[tuple[str, str]]:
        """Count the devices *claim* was allocated (*by* 1) or no longer is (-1); its pools."""
        pools = set()
        for result in claim.results:
            if result.admin:
                continue
            key = (result.driver, result.pool, result.device)
            count = self.allocated.get(key, 0) + by
            if count > 0:
                self.allocated[key] = count
            else:
                self.allocated.pop(key, None)
                self.consumed.pop(key, None)
            if result.consumed_capacity and count > 0:
                used = self.consumed.setdefault(key, {})
                for name, value in result.consumed_capacity.items():
                    used[name] = max(0.0, used.get(name, 0.0) + by * value)
            pools.add((result.driver, result.pool))
        return pools

    def consume(self, pool: Pool) -> None:
        """Add up what the pool's allocated devices consume of its counters."""
        self.memo.consume((pool.driver, pool.name))
        pool.consumed = {}
        for device in pool.devices:
            if (pool.driver, pool.name, device.name) in self.allocated:
                for counter_set, counters in device.consumes:
                    for counter, value in counters.items():
                        key = (counter_set, counter)
                        pool.consumed[key] = pool.consumed.get(key, 0.0) + value

    def device_states(self) -> Iterator[tuple[GroupValues, str]]:
        """Each current device's one state: allocated, unusable, tainted, blocked or available.

        ``available`` is what the allocator could pick now for a request tolerating nothing.
        """
        for pool in self.pools.values():
            for device, state in zip(pool.devices, self.states(pool), strict=True):
                yield device.labels, state

    def states(self, pool: Pool) -> list[str]:
        """Each of the pool's devices' state, kept until the pool's use changes.

        The device states family and pending requests' summaries both read them.
        """
        key = (pool.driver, pool.name)
        found = self.memo.states.get(key)
        if found is None:
            found = self.memo.states[key] = [self.state(pool, device) for device in pool.devices]
        return found

    def state(self, pool: Pool, device: DeviceFacts) -> str:
        """The device's one state (see :meth:`device_states`)."""
        if (pool.driver, pool.name, device.name) in self.allocated:
            return "allocated"
        return self.unallocated_state(pool, device)

    def unallocated_state(self, pool: Pool, device: DeviceFacts, counters: bool = True) -> str:
        """The device's state but ``allocated``; not ``blocked`` either without *counters*."""
        if pool.state != USABLE:
            return "unusable"
        if device.taints or self._ruled_blocking(pool, device):
            return "tainted"
        if counters and blocked(device, pool):
            return "blocked"
        return "available"

    def ruled(self, pool: Pool) -> Mapping[str, list[RuleFacts]]:
        """Per device name of the pool, the rules that select it, in the order listed.

        Each rule's selector is read once per pool, and the answer kept for the index: device
        states, pending requests, headroom, the taint families and the claims' tainted results
        all read it.  A rule change makes the index again (see :mod:`kdraexp.store.clusterrows`).
        """
        if not self.rules:
            return _NO_RULES  # the usual cluster: no per-pool map to make and look up
        key = (pool.driver, pool.name)
        found = self._ruled.get(key)
        if found is None:
            found = self._ruled[key] = {}
            for rule in self.rules:
                if not rule.selects_pool(pool.driver, pool.name):
                    continue
                names = (rule.device,) if rule.device else [d.name for d in pool.devices]
                for name in names:
                    selected = found.setdefault(name, [])
                    if not selected or selected[-1] is not rule:  # a name published twice
                        selected.append(rule)
        return found

    def taint_times(self) -> Iterator[tuple[GroupValues, str, str, str, float]]:
        """Each current device's taints with a known time: its own, then its rules'."""
        for pool in self.pools.values():
            ruled = self.ruled(pool)
            for device in pool.devices:
                for key, value, effect, added in device.taint_times:
                    yield device.labels, key, value, effect, added
                for rule in ruled.get(device.name, ()):
                    if rule.added is not None:
                        yield device.labels, rule.key, rule.value, rule.effect, rule.added

    def device_taints(self) -> Iterator[tuple[GroupValues, str, str, str, str]]:
        """Each current device's taints and where each comes from: "" (its own) or a rule."""
        for pool in self.pools.values():
            ruled = self.ruled(pool)
            for device in pool.devices:
                for key, value, effect in device.listed:
                    yield device.labels, key, value, effect, ""
                for rule in ruled.get(device.name, ()):
                    yield device.labels, rule.key, rule.value, rule.effect, rule.name

    def tainted_results(
        self,
    ) -> Iterator[tuple[ClaimFacts, ResultFacts, str, str, str, str, bool]]:
        """Each non-admin result and a taint on its device, with whether the holder keeps it.

        (claim, result, key, value, effect, rule, kept); rule is "" for the device's own taint.
        A result whose device the current generation of its pool lacks (or another shard
        publishes) has none: :func:`kdraexp.families.resourceclaim.allocation_orphaned`.
        """
        for claim in self.claims:
            for result in claim.results:
                if result.admin:
                    continue
                pool = self.pools.get((result.driver, result.pool))
                device = self.devices.get((result.driver, result.pool, result.device))
                if pool is None or device is None:
                    continue
                for key, value, effect in device.listed:
                    held = kept(result.tolerations, key, value, effect)
                    yield claim, result, key, value, effect, "", held
                for rule in self.ruled(pool).get(device.name, ()):
                    held = kept(result.tolerations, rule.key, rule.value, rule.effect)
                    yield claim, result, rule.key, rule.value, rule.effect, rule.name, held

    def _ruled_blocking(self, pool: Pool, device: DeviceFacts) -> bool:
        if not self.rules:
            return False
        return any(rule.blocking for rule in self.ruled(pool).get(device.name, ()))

    def taints(self, pool: Pool, device: DeviceFacts) -> Iterator[tuple[str, str, str]]:
        """The device's blocking taints: its own, then those of the rules that select it."""
        yield from device.taints
        for rule in self.ruled(pool).get(device.name, ()):
            if rule.blocking:
                yield rule.key, rule.value, rule.effect

    def utilization(self, pool: Pool) -> float | None:
        """The mean use of the pool's units (see kube_resourcepool_utilization_ratio).

        A unit is a counter set (see :func:`set_use`) or a device consuming none (see
        :meth:`device_use`).  A pool whose devices are all gone has none: its counters alone
        say nothing of use.
        """
        if not pool.devices:
            return None
        units = [set_use(pool, counter_set) for counter_set in pool.sets]
        units.extend(self.device_use(pool, d) for d in pool.devices if not d.consumes)
        return sum(units) / len(units) if units else None

    def device_use(self, pool: Pool, device: DeviceFacts) -> float:
        """The use of a device consuming no counters, a unit of its own.

        A shareable device is worth its most used capacity; another, 1 when allocated, else 0.
        """
        key = (pool.driver, pool.name, device.name)
        if device.capacities is None:
            return 1.0 if key in self.allocated else 0.0
        used = self.consumed.get(key, {})
        shares = [
            used.get(name, 0.0) / capacity
            for name, capacity in device.capacities.items()
            if capacity > 0
        ]
        return max(shares, default=0.0)

    def capacity_available(self) -> Iterator[tuple[GroupValues, str, float]]:
        """Per shareable device and capacity: what its allocations leave (never below 0)."""
        for pool in self.pools.values():
            for device in pool.devices:
                if device.capacities is None:
                    continue
                used = self.consumed.get((pool.driver, pool.name, device.name), {})
                for name, capacity in device.capacities.items():
                    yield device.labels, name, max(0.0, capacity - used.get(name, 0.0))

    def claim_costs(self) -> Iterator[tuple[GroupValues, str, float]]:
        """Per claim and class: the class's hourly cost times the share of each device used.

        A sum past float64 is no cost: not written, and counted as a value not read.
        """
        for claim in self.claims:
            if not claim.home:
                continue
            sums: dict[str, CostSum] = {}
            for result in claim.results:
                cost = self.costs.get(result.deviceclass)
                if result.admin or cost is None:
                    continue
                share = self._share(claim, result)
                if share is not None:
                    summed = sums.get(result.deviceclass)
                    if summed is None:
                        summed = sums[result.deviceclass] = CostSum()
                    summed.add(cost, *share)
            for deviceclass, summed in sums.items():
                total = summed.total()
                if math.isfinite(total):
                    yield claim.labels, deviceclass, total
                    continue
                self.problems.add(
                    "deviceclasses",
                    HOURLY_COST,
                    f"{claim.where}: the hourly cost of its devices of DeviceClass {deviceclass} "
                    "is past the largest float64, so it is not written",
                )

    def _share(self, claim: ClaimFacts, result: ResultFacts) -> tuple[float, float] | None:
        """The share of its device *result* uses: (what it consumes, of what capacity)."""
        device = self.devices.get((result.driver, result.pool, result.device))
        if not result.consumed and not (device is not None and device.shareable):
            return 1.0, 1.0
        capacity = device.share_capacity if device is not None else None
        if result.consumed_share is None or not capacity:
            self.problems.add(
                "resourceclaims",
                "consumedCapacity",
                f"{claim.where} device {result.driver}/{result.pool}/{result.device}: the share "
                "of the shareable device used is unknown (no consumed capacity, or no such "
                "capacity on the device), so it costs nothing",
            )
            return None
        return result.consumed_share, capacity


def _everything(driver: str, pool: str) -> bool:
    return True


def current(slices: Mapping[str, SliceFacts]) -> Iterator[str]:
    """The keys of the slices of their pool's current generation (the highest among its slices)."""
    highest: dict[tuple[str, str], int] = {}
    for facts in slices.values():
        pool = (facts.driver, facts.pool)
        highest[pool] = max(highest.get(pool, facts.generation), facts.generation)
    for key, facts in slices.items():
        if facts.generation == highest[(facts.driver, facts.pool)]:
            yield key


def set_use(pool: Pool, counter_set: str, consumed: Mapping[Any, float] | None = None) -> float:
    """How much of a counter set is used: its most used counter or placement group.

    Counters named alike but for a trailing number (``memory-slice-0`` ... ``-7``) are one
    placement group, worth consumed over total summed over the group.  *consumed* is what is
    taken of each (counter set, counter); the pool's allocations by default.
    """
    taken = pool.consumed if consumed is None else consumed
    ratios: list[float] = []
    groups: dict[str, list[float]] = {}
    for counter, total in pool.sets.get(counter_set, ()):
        used = taken.get((counter_set, counter), 0.0)
        group = _PLACEMENT.sub("", counter)
        if group == counter:
            ratios.append(used / total)
        else:
            summed = groups.setdefault(group, [0.0, 0.0])
            summed[0] += used
            summed[1] += total
    ratios.extend(used / total for used, total in groups.values())
    return max(ratios, default=0.0)


def blocked(device: DeviceFacts, pool: Pool, consumed: Mapping[Any, float] | None = None) -> bool:
    """Whether the counters the device consumes exceed what its pool has left.

    *consumed* is what is taken of each (counter set, counter); the pool's allocations by default.
    """
    taken = pool.consumed if consumed is None else consumed
    for counter_set, counters in device.consumes:
        for counter, need in counters.items():
            key = (counter_set, counter)
            left = pool.totals.get(key, 0.0) - taken.get(key, 0.0)
            if need - left > TOLERANCE * max(1.0, abs(need)):
                return True
    return False


def take(device: DeviceFacts, consumed: dict[tuple[str, str], float], by: int = 1) -> None:
    """Add what the device consumes of its pool's counters to *consumed* (*by* -1: give back)."""
    for counter_set, counters in device.consumes:
        for counter, need in counters.items():
            key = (counter_set, counter)
            consumed[key] = consumed.get(key, 0.0) + by * need
