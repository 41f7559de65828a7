"""What each listed object leaves behind for the join: facts of slices, claims, rules, pods, Nodes.

Read once per object as its page arrives (each kind's ``KindSpec.facts``) and kept with its entry
while the object is unchanged; :mod:`.index` joins them.  Every fact is kept out of the cyclic
garbage collector (they form no cycles): a collection holds one per device and claim, and
tracked objects make every collector pass longer.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from kdraexp.dra.gated import RequestPolicy, TimedToleration
from kdraexp.dra.nodeselector import NodeSelector
from kdraexp.util.labels import GroupValues

Counters = tuple[tuple[str, dict[str, float]], ...]
"""(counter set, {counter: quantity}) pairs."""
NOTHING: Mapping[str, float] = MappingProxyType({})
"""The capacities a result that consumes none consumes (one read-only mapping for all)."""
TOLERANCE = 1e-9
"""Relative slack of a float comparison: quantities are read as floats, the allocator's are exact
(``resource.Quantity``), so two that differ by less are the same amount."""


class DeviceFacts(msgspec.Struct, gc=False):
    """What the pool families need of one device (untracked, as every fact: see above)."""

    labels: GroupValues
    name: str
    taints: tuple[tuple[str, str, str], ...]
    """(key, value, effect) of each taint with effect NoSchedule or NoExecute."""
    consumes: Counters
    share_capacity: float | None
    """The capacity named by ``--cost-share-capacity``, for shareable devices' cost."""
    shareable: bool
    capacities: Mapping[str, float] | None = None
    """Every capacity, for a device that allows multiple allocations (None for the others)."""
    defaults: Mapping[str, float] | None = None
    """What a request naming no capacity consumes of each (its policy's default, else all)."""
    classes: tuple[str, ...] = ()
    """The DeviceClasses whose every selector the device satisfies."""
    unsure: tuple[str, ...] = ()
    """The DeviceClasses whose match with the device could not be decided (a selector error)."""
    node: str = ""
    """The node the device is on; "" for a network-attached device."""
    taint_times: tuple[tuple[str, str, str, float], ...] = ()
    """(key, value, effect, timeAdded) of each taint whose time is known."""
    listed: tuple[tuple[str, str, str], ...] = ()
    """(key, value, effect) of each taint of a known effect (None too), as published."""
    selector: NodeSelector | None = None
    """The nodes it serves when a node selector says which (its own, or its slice's)."""
    policies: Mapping[str, RequestPolicy] | None = None
    """Per capacity of a device allowing multiple allocations, the request policy rounding or
    refusing what a request asks of it (None: no capacity has one)."""


class SliceFacts(msgspec.Struct, gc=False):
    """What the pool families need of one slice, and its rows that depend on its generation."""

    driver: str
    pool: str
    generation: int
    slice_count: int | None
    shared: Counters
    devices: tuple[DeviceFacts, ...]
    rows: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    """(family, flattened rows) of the families that count only the current generation."""
    source: bytes | None = None
    """The slice's JSON, deflated: read again when a claim's own selectors must be judged."""
    name: str = ""


class ResultFacts(msgspec.Struct, gc=False, kw_only=True):
    """One allocation result of a claim (made by keyword: its fields read alike)."""

    driver: str
    pool: str
    device: str
    admin: bool
    deviceclass: str
    consumed: bool
    """Whether the result has a consumedCapacity (a share of a shareable device)."""
    consumed_share: float | None
    """Its consumed ``--cost-share-capacity``."""
    consumed_capacity: Mapping[str, float] = NOTHING
    """Every capacity it consumes of a shareable device."""
    request: str = ""
    """The request it answers: ``<request>`` or ``<request>/<alternative>``."""
    tolerations: tuple[TimedToleration, ...] = ()
    """The tolerations the scheduler copied into the result from the request."""
    hidden: bool = False
    """Its driver takes a device out of its slices while it is allocated
    (``--hides-allocated-devices``): missing from a published pool, it is hidden, not gone."""


class RequestFacts(msgspec.Struct, gc=False, frozen=True):
    """One request (or ``firstAvailable`` alternative) of a pending claim, as it is judged.

    Equal requests are judged alike: claims made from one template share one judgement.
    """

    name: str
    """As results name it: ``<request>`` or ``<request>/<alternative>``."""
    deviceclass: str
    selectors: tuple[str, ...]
    all: bool
    """``allocationMode: All``."""
    count: int
    tolerations: tuple[tuple[str, str, str, str], ...]
    admin: bool
    capacity: tuple[tuple[str, float], ...]
    """``capacity.requests``: what it consumes of a device that allows multiple allocations."""


class ClaimFacts(msgspec.Struct, gc=False):
    """What the cost and pool families need of one claim."""

    labels: GroupValues
    where: str
    results: tuple[ResultFacts, ...]
    home: bool = True
    """Whether this shard writes the claim (else its results only mark devices allocated)."""
    pending: tuple[RequestFacts, ...] = ()
    """Its requests, while it is pending (not allocated, not being deleted)."""
    reserved: tuple[str, ...] = ()
    """The uids of the pods it is reserved for (``status.reservedFor``)."""


class RuleFacts(msgspec.Struct, gc=False):
    """A DeviceTaintRule's selector and taint (an empty driver, pool or device selects all)."""

    driver: str
    pool: str
    device: str
    key: str = ""
    value: str = ""
    effect: str = "NoSchedule"
    added: float | None = None
    """The taint's ``timeAdded``, in seconds."""
    name: str = ""
    """The DeviceTaintRule's name."""
    selector: bool = True
    """Whether the rule has a ``deviceSelector``: without one it selects no device."""

    @property
    def blocking(self) -> bool:
        """Whether the taint keeps claims that do not tolerate it off (NoSchedule, NoExecute)."""
        return self.effect in ("NoSchedule", "NoExecute")

    def selects_pool(self, driver: str, pool: str) -> bool:
        """Whether the rule's selector may match devices of the pool."""
        return self.selector and self.driver in ("", driver) and self.pool in ("", pool)


class Placement(msgspec.Struct, gc=False, frozen=True):
    """Which nodes a pod may run on, as far as the scheduler's node filters go.

    ``spec.nodeName``, ``spec.nodeSelector`` and required node affinity; not taints, not
    resources.
    """

    node_name: str = ""
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: NodeSelector | None = None

    def allows(self, node: NodeFacts) -> bool:
        """Whether the pod may run on *node*."""
        if self.node_name and node.name != self.node_name:
            return False
        if any(node.labels.get(key) != value for key, value in self.node_selector):
            return False
        return self.affinity is None or self.affinity.matches(node.name, node.labels)


class PodFacts(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """What the pod families need of one pod that matters (made by keyword: ten fields)."""

    namespace: str
    name: str
    uid: str
    node: str
    """The node the scheduler placed it on (``spec.nodeName``); "" while not bound."""
    extended: tuple[tuple[str, float], ...]
    """Per extended resource it asks for, the quantity (its containers' sum, or an init
    container's, whichever is larger)."""
    named: tuple[str, ...]
    """The ResourceClaims it names itself (``resourceClaimName``)."""
    unmade: bool
    """A claim of one of its templates is not made yet (no ``resourceClaimStatuses`` entry)."""
    claims: tuple[tuple[str, str], ...]
    """(its name for a claim, the ResourceClaim's name): named, made from a template, or made
    by the scheduler for its extended resources."""
    scheduled: tuple[str, str, str] | None
    """``PodScheduled``'s (status, reason, message), if it has one."""
    health: tuple[tuple[str, str, str, str], ...]
    """(container, entry name, resourceID, health) of each device in allocatedResourcesStatus."""
    placement: Placement | None = None
    """Which nodes it may run on, when it says (None: any)."""
    waiting_since: float | None = None
    """Bound and not started (``PodReadyToStartContainers`` not True; without the condition, no
    container running or run), not done nor being deleted: since when it waits."""

    @property
    def bound(self) -> bool:
        """Whether the scheduler has placed it."""
        return bool(self.node)


class NodeFacts(msgspec.Struct, gc=False, frozen=True):
    """What the Node view needs of one Node: which selectors match it, and its state."""

    name: str
    labels: Mapping[str, str]
    state: str
    """``ready``, ``not_ready`` (its ``Ready`` condition not ``True``) or ``unschedulable``
    (cordoned, and ready)."""
