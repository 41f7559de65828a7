"""ResourceClaim families: what each claim asks for, what it was given, its state and its cost."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from kdraexp.allocator import pending
from kdraexp.allocator.facts import NOTHING, ClaimFacts, RequestFacts, ResultFacts
from kdraexp.allocator.index import ClusterIndex
from kdraexp.allocator.join import pool_key
from kdraexp.allocator.scopes import Per
from kdraexp.dra import gated, wire
from kdraexp.dra.listing import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kdraexp.families.context import Context
from kdraexp.families.family import CLUSTER, FamilyKeywords, Row, Stability, family
from kdraexp.families.kind import KindSpec, ShardKey
from kdraexp.families.metadata import Named, metadata_families
from kdraexp.util.labels import LabelGroup

C = LabelGroup(("namespace", "resourceclaim_name"))
"""The claim labels every new claim family leads with."""

_RESOURCE = RESOURCE_CLAIMS.plural
_SMALL = {float(n): float(n) for n in range(65)}
"""Small counts as shared float objects: a claim's rows are kept as long as it is unchanged."""
EVERY_POOL = "a shard does not see every pool a pending claim could be allocated from"


class Result:
    """One allocation result, with the class of the request it answers."""

    __slots__ = (
        "admin",
        "binding",
        "consumed",
        "device",
        "deviceclass",
        "driver",
        "failing",
        "pool",
        "request",
        "share_id",
        "tolerations",
    )

    def __init__(
        self, result: wire.DeviceResult, view: ClaimView, admin_requests: set[str]
    ) -> None:
        self.request = sys.intern(result.request or "")
        self.driver = sys.intern(result.driver or "")
        self.pool = sys.intern(result.pool or "")
        self.device = sys.intern(result.device or "")
        if isinstance(result.admin_access, bool):
            self.admin = result.admin_access
        else:
            self.admin = self.request in admin_requests
        self.share_id = result.share_id if isinstance(result.share_id, str) else ""
        self.deviceclass = view.request_classes.get(self.request, "")
        where = f"{view.where} device {self.driver}/{self.pool}/{self.device}"
        problems = view.context.problems
        self.consumed = gated.consumed_capacity(
            result.consumed_capacity, problems, _RESOURCE, where
        )
        self.tolerations = gated.timed_tolerations(result.tolerations, problems, _RESOURCE, where)
        self.binding: tuple[str, ...] = ()
        """The conditions the driver sets True before the scheduler binds the pod."""
        self.failing: tuple[str, ...] = ()
        """The conditions of which one True fails the binding."""
        if result.binding_conditions:
            self.binding = gated.names(
                result.binding_conditions,
                problems,
                _RESOURCE,
                "bindingConditions",
                where,
                gated.BINDING_CONDITIONS,
            )
            self.failing = gated.names(
                result.binding_failure_conditions,
                problems,
                _RESOURCE,
                "bindingFailureConditions",
                where,
                gated.BINDING_CONDITIONS,
            )


class ClaimView:
    """One ResourceClaim, read once for all its families."""

    __slots__ = (
        "_conditions",
        "_statuses",
        "context",
        "deleting",
        "labels",
        "meta",
        "name",
        "namespace",
        "request_classes",
        "results",
        "status",
        "where",
        "wire",
    )

    def __init__(self, item: wire.ResourceClaim, context: Context) -> None:
        self.wire = item
        self.context = context
        self.meta = item.metadata or wire.ObjectMeta()
        self.name = self.meta.name or ""
        self.namespace = sys.intern(self.meta.namespace or "")
        self.where = f"ResourceClaim {self.namespace}/{self.name}"
        self.labels = C.values(self.namespace, self.name)
        self.deleting = bool(self.meta.deletion_timestamp)
        self.status = item.status or wire.ClaimStatus()
        self.request_classes: dict[str, str] = {}
        admin_requests = set()
        for request, _, exact in self.requests():
            self.request_classes[request] = sys.intern(exact.device_class_name or "")
            if isinstance(exact, wire.ExactRequest) and exact.admin_access is True:
                admin_requests.add(request)
        allocation = self.status.allocation
        results = allocation.devices.results if allocation and allocation.devices else None
        self.results = [Result(result, self, admin_requests) for result in results or ()]
        self._statuses: list[dict[str, Any]] | None = None
        self._conditions: list[gated.DeviceConditions] | None = None

    def device_statuses(self) -> list[dict[str, Any]]:
        """``status.devices[]`` entries, read once for the families that read them."""
        if self._statuses is None:
            self._statuses = gated.device_statuses(
                self.status.devices, self.context.problems, _RESOURCE, self.where
            )
        return self._statuses

    def device_conditions(self) -> list[gated.DeviceConditions]:
        """Each ``status.devices[]`` entry's conditions, read once (what cannot be, counted)."""
        if self._conditions is None:
            self._conditions = gated.device_conditions(
                self.device_statuses(), self.context.problems, _RESOURCE, self.where
            )
        return self._conditions

    def binding(self, failed: bool) -> Iterator[tuple[Result, str]]:
        """Each binding condition not yet True (*failed*: each failure condition True).

        Of the results that bind (that have binding conditions), as kube-scheduler's PreBind
        reads them: the first ``status.devices[]`` entry naming the device (whatever its
        shareID), and in it the first condition of each type.
        """
        binds = [result for result in self.results if result.binding]
        if not binds:
            return
        first: dict[tuple[str, str, str], tuple[tuple[str, str], ...]] = {}
        for device, conditions in self.device_conditions():
            first.setdefault(device, conditions)
        for result in binds:
            found = dict(reversed(first.get((result.driver, result.pool, result.device), ())))
            for condition in result.failing if failed else result.binding:
                if (found.get(condition) == "true") is failed:
                    yield result, condition

    def requests(self) -> Iterator[tuple[str, str, wire.ExactRequest | wire.Subrequest]]:
        """(request name as results name it, request name, the request or alternative)."""
        devices = (self.wire.spec or wire.ClaimSpec()).devices or wire.DeviceClaim()
        for request in devices.requests or ():
            name = sys.intern(request.name or "")
            if request.exactly is not None:
                yield name, name, request.exactly
            for alternative in request.first_available or ():
                yield f"{name}/{alternative.name or ''}", name, alternative

    @property
    def allocated(self) -> bool:
        """Whether the claim has an allocation."""
        return self.status.allocation is not None

    def pending_requests(self) -> tuple[RequestFacts, ...]:
        """Each request and alternative as it is judged, while the claim is pending."""
        if self.state() != "pending":
            return ()
        problems, found = self.context.problems, []
        for request, _, spec in self.requests():
            where = f"{self.where} request {request}"
            found.append(
                RequestFacts(
                    request,
                    sys.intern(spec.device_class_name or ""),
                    tuple(
                        (selector.cel.expression or "") if selector.cel else ""
                        for selector in spec.selectors or ()
                    ),
                    spec.allocation_mode == "All",
                    gated.integer(spec.count) or 1,
                    gated.tolerations(spec.tolerations, problems, _RESOURCE, where),
                    isinstance(spec, wire.ExactRequest) and spec.admin_access is True,
                    tuple(
                        sorted(
                            gated.capacity_requests(
                                spec.capacity, problems, _RESOURCE, where
                            ).items()
                        )
                    ),
                )
            )
        return tuple(found)

    def facts(self) -> ClaimFacts:
        """What the cost and pool families need of this claim."""
        share = self.context.options.cost_share_capacity
        hiding = self.context.options.hides_allocated_devices
        return ClaimFacts(
            self.labels,
            self.where,
            tuple(
                ResultFacts(
                    driver=r.driver,
                    pool=r.pool,
                    device=r.device,
                    admin=r.admin,
                    deviceclass=r.deviceclass,
                    consumed=bool(r.consumed),
                    consumed_share=r.consumed.get(share, r.consumed.get(f"{r.driver}/{share}")),
                    consumed_capacity=r.consumed or NOTHING,
                    request=r.request,
                    tolerations=r.tolerations,
                    hidden=r.driver in hiding,
                )
                for r in self.results
            ),
            pending=self.pending_requests(),
            reserved=tuple([consumer.uid or "" for consumer in _core_pods(self)]),
        )

    def state(self) -> str:
        """deleting, pending, reserved or allocated (kubectl's rule, one state)."""
        if self.deleting:
            return "deleting"
        if not self.allocated:
            return "pending"
        return "reserved" if self.status.reserved_for else "allocated"


def _core_pods(view: ClaimView) -> Iterator[wire.Consumer]:
    for consumer in view.status.reserved_for or ():
        if consumer.resource == "pods" and not consumer.api_group:
            yield consumer


@family(
    "kube_resourceclaim_status_allocated_device",
    "Reports 1 when a specific device is allocated to a ResourceClaim.",
    ("resourceclaim_name", "namespace", "pool", "device_name", "driver"),
    RESOURCE_CLAIMS,
    "metadata.{name,namespace}, status.allocation.devices.results[].{driver,pool,device}",
    stability=Stability.STABLE,
    original=True,
)
def allocated_device(view: ClaimView) -> Iterator[Row]:
    """One row per allocation result."""
    for result in view.results:
        yield (view.name, view.namespace, result.pool, result.device, result.driver, 1.0)


@family(
    "kube_resourceclaim_status_reserved_for_pod",
    "Reports 1 when the ResourceClaim is reserved for a specific Pod.",
    ("resourceclaim_name", "namespace", "pod_name", "uid"),
    RESOURCE_CLAIMS,
    "status.reservedFor[].{apiGroup,resource,name,uid}",
    stability=Stability.STABLE,
    original=True,
)
def reserved_for_pod(view: ClaimView) -> Iterator[Row]:
    """One row per consumer that is a core Pod (``resource: pods``, empty ``apiGroup``)."""
    for consumer in _core_pods(view):
        yield (view.name, view.namespace, consumer.name or "", consumer.uid or "", 1.0)


@family(
    "kube_resourceclaim_status_reserved_total",
    "Total number of Pods actively reserving this ResourceClaim.",
    ("resourceclaim_name", "namespace"),
    RESOURCE_CLAIMS,
    "status.reservedFor[]",
    stability=Stability.STABLE,
    original=True,
)
def reserved_total(view: ClaimView) -> Iterator[Row]:
    """One row per claim: its core Pod consumers, 0 when none."""
    count = float(sum(1 for _ in _core_pods(view)))
    yield (view.name, view.namespace, _SMALL.get(count, count))


@family(
    "kube_resourceclaim_info",
    "Information about a ResourceClaim and its controlling owner.",
    (C, "uid", "owner_kind", "owner_name"),
    RESOURCE_CLAIMS,
    "metadata.{uid,ownerReferences[controller]}",
)
def claim_info(view: ClaimView) -> Iterator[Row]:
    """One row per claim; the owner is the controller ownerReference (a Pod, a PodGroup...)."""
    kind = name = ""
    for owner in view.meta.owner_references or ():
        if owner.controller is True:
            kind, name = sys.intern(owner.kind or ""), owner.name or ""
            break
    yield (view.labels, view.meta.uid or "", kind, name, 1.0)


@family(
    "kube_resourceclaim_created",
    "Unix creation timestamp of a ResourceClaim.",
    (C,),
    RESOURCE_CLAIMS,
    "metadata.creationTimestamp",
)
def claim_created(view: ClaimView) -> Iterator[Row]:
    """The creation time in seconds; pending age is ``time() - kube_resourceclaim_created``."""
    created = view.context.created(_RESOURCE, view.meta, view.where)
    if created is None:
        return
    yield (view.labels, created)


@family(
    "kube_resourceclaim_status_allocation_timestamp_seconds",
    "Unix time a ResourceClaim was allocated, when the scheduler recorded it.",
    (C,),
    RESOURCE_CLAIMS,
    "status.allocation.allocationTimestamp",
)
def claim_allocated_at(view: ClaimView) -> Iterator[Row]:
    """The allocation time in seconds; allocation latency is this minus ``_created``."""
    allocation = view.status.allocation
    value = allocation.allocation_timestamp if allocation is not None else None
    if value is None:
        return  # a gated field, and "not guaranteed to be set"
    try:
        allocated = gated.timestamp(str(value))
    except gated.Unreadable as error:
        field = "status.allocation.allocationTimestamp"
        view.context.problems.add(_RESOURCE, field, f"{view.where} allocationTimestamp: {error}")
        return
    yield (view.labels, allocated)


@family(
    "kube_resourceclaim_status_state",
    "Reports 1 for a ResourceClaim's state: pending, allocated, reserved or deleting.",
    (C, "state"),
    RESOURCE_CLAIMS,
    "metadata.deletionTimestamp, status.allocation, status.reservedFor",
)
def claim_state(view: ClaimView) -> Iterator[Row]:
    """Only the active state is written."""
    yield (view.labels, view.state(), 1.0)


@family(
    "kube_resourceclaim_request_devices",
    "Devices a ResourceClaim requests, per request (firstAvailable alternatives as request/sub).",
    (C, "request", "deviceclass_name", "allocation_mode"),
    RESOURCE_CLAIMS,
    "spec.devices.requests[].{name,exactly,firstAvailable[]}.{deviceClassName,allocationMode,count}"
    ", status.allocation.devices.results[].request",
)
def request_devices(view: ClaimView) -> Iterator[Row]:
    """``count`` (default 1); for ``All``, the results given so far (0 while pending).

    Alternatives of one request are written side by side: they are not to be summed.
    """
    for request, _, spec in view.requests():
        mode = sys.intern(spec.allocation_mode or "ExactCount")
        if mode == "All":
            count = float(sum(1 for result in view.results if result.request == request))
        else:
            count = float(gated.integer(spec.count) or 1)
        count = _SMALL.get(count, count)
        yield (view.labels, request, sys.intern(spec.device_class_name or ""), mode, count)


@family(
    "kube_resourceclaim_allocation_result_info",
    "A device allocated to a ResourceClaim, with the class of the request it answers.",
    (C, "request", "driver", "pool", "device_name", "deviceclass_name", "admin_access", "share_id"),
    RESOURCE_CLAIMS,
    "status.allocation.devices.results[].{request,driver,pool,device,adminAccess,shareID}, "
    "spec.devices.requests[]",
)
def allocation_result_info(view: ClaimView) -> Iterator[Row]:
    """One row per result; adminAccess results are shown and never count as use."""
    for result in view.results:
        yield (
            view.labels,
            result.request,
            result.driver,
            result.pool,
            result.device,
            result.deviceclass,
            "true" if result.admin else "false",
            result.share_id,
            1.0,
        )


@family(
    "kube_resourceclaim_allocation_consumed_capacity",
    "Capacity of a shareable device that a ResourceClaim's allocation consumes.",
    (C, "driver", "pool", "device_name", "share_id", "capacity"),
    RESOURCE_CLAIMS,
    "status.allocation.devices.results[].consumedCapacity",
)
def consumed_capacity(view: ClaimView) -> Iterator[Row]:
    """Each consumed capacity of each result, as a float."""
    for result in view.results:
        for name, value in result.consumed.items():
            yield (
                view.labels,
                result.driver,
                result.pool,
                result.device,
                result.share_id,
                name,
                value,
            )


_DEVICE_CONDITIONS = "status.devices[].{driver,pool,device,conditions[].{type,status}}"
_BINDING = (C, "driver", "pool", "device_name", "condition")
"""The labels of a binding condition's row."""


@family(
    "kube_resourceclaim_status_device_condition",
    "A condition a driver reports for a device allocated to a ResourceClaim.",
    (C, "driver", "pool", "device_name", "condition", "status"),
    RESOURCE_CLAIMS,
    _DEVICE_CONDITIONS,
)
def device_condition(view: ClaimView) -> Iterator[Row]:
    """One row per condition; status is true, false or unknown."""
    for (driver, pool, device), conditions in view.device_conditions():
        for condition, status in conditions:
            yield (view.labels, driver, pool, device, condition, status, 1.0)


@family(
    "kube_resourceclaim_allocation_binding",
    "Reports 1 for a binding condition of a device allocated to a ResourceClaim not yet True.",
    _BINDING,
    RESOURCE_CLAIMS,
    "status.allocation.devices.results[].{driver,pool,device,bindingConditions}, "
    + _DEVICE_CONDITIONS,
)
def allocation_binding(view: ClaimView) -> Iterator[Row]:
    """Each binding condition of each result its device's status does not have True.

    While one is written, the scheduler holds the pod in PreBind (not bound), up to its
    binding timeout counted from the allocation's ``allocationTimestamp``.
    """
    for result, condition in view.binding(failed=False):
        yield (view.labels, result.driver, result.pool, result.device, condition, 1.0)


@family(
    "kube_resourceclaim_allocation_binding_failed",
    "Reports 1 for a binding failure condition True for a device allocated to a ResourceClaim.",
    _BINDING,
    RESOURCE_CLAIMS,
    "status.allocation.devices.results[].{driver,pool,device,bindingConditions,"
    "bindingFailureConditions}, " + _DEVICE_CONDITIONS,
)
def allocation_binding_failed(view: ClaimView) -> Iterator[Row]:
    """Each binding failure condition of each result its device's status has True.

    The scheduler then gives up binding the pod and deallocates the claim at its next attempt.
    """
    for result, condition in view.binding(failed=True):
        yield (view.labels, result.driver, result.pool, result.device, condition, 1.0)


@family(
    "kube_resourceclaim_hourly_cost",
    "Hourly cost of what a ResourceClaim was allocated, per device class.",
    (C, "deviceclass_name"),
    CLUSTER,
    "status.allocation.devices.results[].{adminAccess,consumedCapacity}, the class's "
    "hourly-cost annotation, the device's capacity (shareable devices)",
    needs=(RESOURCE_CLAIMS, DEVICE_CLASSES, RESOURCE_SLICES),
    per=Per.CLAIM,
)
def hourly_cost(index: ClusterIndex) -> Iterator[Row]:
    """The class's cost times the share used, summed over the claim's non-admin results."""
    yield from index.claim_costs()


_JUDGED: FamilyKeywords = {
    "needs": (RESOURCE_CLAIMS, RESOURCE_SLICES, DEVICE_CLASSES),
    "per": Per.PENDING,
    "evaluates_selectors": True,
    "whole_cluster": EVERY_POOL,
}
"""How the families of pending claims' judgements are declared: every pool, class and claim."""


@family(
    "kube_resourceclaim_pending_reason",
    "Why a pending ResourceClaim's request cannot be allocated now, as the allocator judges it.",
    (C, "request", "deviceclass_name", "reason"),
    CLUSTER,
    "spec.devices.requests[] (class, selectors, allocationMode, count, tolerations, capacity), "
    "DeviceClass selectors, ResourceSlices, allocations, DeviceTaintRules (when listed)",
    **_JUDGED,
)
def pending_reason(index: ClusterIndex) -> Iterator[Row]:
    """One reason per request or alternative of each pending claim (see pending.REASONS)."""
    for labels, request, deviceclass, reason, _ in pending.reasons(index, report=True):
        yield (labels, request, deviceclass, reason, 1.0)


@family(
    "kube_resourceclaim_request_matching_devices",
    "Devices a pending ResourceClaim's request matches, by their state.",
    (C, "request", "state"),
    CLUSTER,
    "spec.devices.requests[].{deviceClassName,selectors,capacity}, DeviceClass selectors, "
    "ResourceSlices, allocations",
    **_JUDGED,
)
def request_matching(index: ClusterIndex) -> Iterator[Row]:
    """Per request of each pending claim, each device state with at least one device."""
    for labels, request, _, _, judgement in pending.reasons(index):
        for state, count in judgement.matching:
            yield (labels, request, state, float(count))


@family(
    "kube_resourceclaim_allocation_orphaned",
    "Reports 1 for a device allocated to a ResourceClaim that its pool no longer publishes.",
    (C, "driver", "pool", "device_name", "reason"),
    CLUSTER,
    "status.allocation.devices.results[].{driver,pool,device,adminAccess}, the current "
    "generation of each pool's ResourceSlices (drivers named by --hides-allocated-devices)",
    needs=(RESOURCE_CLAIMS, RESOURCE_SLICES),
    per=Per.CLAIM,
)
def allocation_orphaned(index: ClusterIndex) -> Iterator[Row]:
    """Each non-admin result naming a device the current generation of its pool lacks.

    ``reason``: ``pool_gone`` (no slice of the pool is left), ``hidden_by_driver`` (its pool is
    published and its driver takes allocated devices out of its slices), else ``device_gone``.
    Written by the shard of the result's pool, which alone knows whether the pool publishes it.
    """
    for claim in index.claims:
        for result in claim.results:
            key = (result.driver, result.pool, result.device)
            if result.admin or key in index.devices or not index.owns(key[0], key[1]):
                continue
            if (result.driver, result.pool) not in index.pools:
                reason = "pool_gone"
            else:
                reason = "hidden_by_driver" if result.hidden else "device_gone"
            yield (claim.labels, result.driver, result.pool, result.device, reason, 1.0)


@family(
    "kube_resourceclaim_allocation_tainted",
    "A taint on a device allocated to a ResourceClaim, and whether the claim keeps the device.",
    (
        C,
        "request",
        "driver",
        "pool",
        "device_name",
        "key",
        "value",
        "effect",
        "devicetaintrule",
        "tolerated",
    ),
    CLUSTER,
    "status.allocation.devices.results[].{request,driver,pool,device,adminAccess,tolerations}, "
    "spec.devices[].taints of the current generation, DeviceTaintRules (when listed)",
    needs=(RESOURCE_CLAIMS, RESOURCE_SLICES),
    per=Per.CLAIM,
)
def allocation_tainted(index: ClusterIndex) -> Iterator[Row]:
    """One row per (non-admin result, taint on its device): own ("") or a rule's.

    ``tolerated`` for a NoExecute taint is the eviction controller's judgement (a toleration of
    effect NoExecute exactly, without tolerationSeconds); for other effects the allocator's.
    """
    for claim, result, key, value, effect, rule, kept in index.tainted_results():
        yield (
            claim.labels,
            result.request,
            result.driver,
            result.pool,
            result.device,
            key,
            value,
            effect,
            rule,
            "true" if kept else "false",
            1.0,
        )


@family(
    "kube_resourceclaim_status_device_info",
    "A device a driver reports in a ResourceClaim's status, with its network data.",
    (C, "driver", "pool", "device_name", "share_id", "interface_name", "hardware_address"),
    RESOURCE_CLAIMS,
    "status.devices[].{driver,pool,device,shareID,networkData.{interfaceName,hardwareAddress},"
    "data} (data keys named by --claim-device-data)",
)
def status_device_info(view: ClaimView) -> Iterator[Row]:
    """One row per ``status.devices[]`` entry; ``--claim-device-data`` adds ``data_<key>``."""
    keys = view.context.options.claim_device_data
    for entry in view.device_statuses():
        network = entry.get("networkData")
        network = network if isinstance(network, dict) else {}
        data = entry.get("data")
        data = data if isinstance(data, dict) else {}
        yield (
            view.labels,
            gated.text(entry.get("driver")),
            gated.text(entry.get("pool")),
            gated.text(entry.get("device")),
            gated.text(entry.get("shareID")),
            gated.text(network.get("interfaceName")),
            gated.text(network.get("hardwareAddress")),
            *(gated.scalar_text(data.get(key.name)) for key in keys),
            1.0,
        )


@family(
    "kube_resourceclaim_allocation_node_info",
    "The nodes a pod using an allocated claim may run on (its allocation's node selector): "
    'node_name where the selector names exactly one node, else ""; the selector as '
    "kube_resourceslice_node_selector_info writes it.",
    (C, "node_name", "selector"),
    RESOURCE_CLAIMS,
    "status.allocation.nodeSelector",
)
def allocation_node_info(view: ClaimView) -> Iterator[Row]:
    """One row per allocated claim whose allocation names nodes (none for network devices)."""
    allocation = view.status.allocation
    if allocation is None:
        return
    selector = view.context.node_selector(allocation.node_selector, _RESOURCE, view.where)
    if selector is not None:
        yield (view.labels, selector.node, selector.text, 1.0)


def _named(view: ClaimView) -> Named:
    return (view.labels,), view.meta


claim_labels, claim_annotations = metadata_families(RESOURCE_CLAIMS, (C,), _named)

FAMILIES = (
    allocated_device,
    reserved_for_pod,
    reserved_total,
    claim_info,
    claim_created,
    claim_allocated_at,
    claim_state,
    request_devices,
    allocation_result_info,
    consumed_capacity,
    device_condition,
    allocation_binding,
    allocation_binding_failed,
    hourly_cost,
    pending_reason,
    request_matching,
    allocation_orphaned,
    allocation_tainted,
    status_device_info,
    allocation_node_info,
    claim_labels,
    claim_annotations,
)


def _claim_facts(view: ClaimView, written: bool) -> ClaimFacts:
    facts = view.facts()
    facts.home = written  # a claim another shard writes still blocks devices here
    return facts


def _claim_shard(item: wire.ResourceClaim) -> ShardKey:
    """A claim is written with the pool of its first result, else by its name.

    The shards of every pool it uses read it too: it changes their device states and costs.
    """
    status = item.status
    allocation = status.allocation if status else None
    results = (allocation.devices.results or ()) if allocation and allocation.devices else ()
    pools = tuple(pool_key(r.driver or "", r.pool or "") for r in results)
    meta = item.metadata
    home = pools[0] if pools else f"{meta.namespace or ''}/{meta.name or ''}" if meta else "/"
    return ShardKey(home, pools)


KIND = KindSpec(RESOURCE_CLAIMS, ClaimView, _claim_facts, _claim_shard)
