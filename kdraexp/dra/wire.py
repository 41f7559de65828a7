"""The ``resource.k8s.io`` objects as they arrive, reduced to the fields the metrics read.

Every other field is skipped by the decoder, and every field may be absent or null (1.34 sends
``"devices": null``).  Fields behind feature gates (taints, counters, consumed capacity, device
status...) stay undecoded (``Raw``) or untyped here: a server of another release may send them in
another shape, and one odd value must cost that value, not the page.  :mod:`kdraexp.dra.gated` reads
them one at a time.

A family that reads a field not named here gets nothing: add the field first.
"""

from __future__ import annotations

from typing import Any

import msgspec

ABSENT = msgspec.Raw()
"""An undecoded field that was not sent (empty), as ``Raw`` fields cannot be None."""


class Wire(msgspec.Struct, gc=False):
    """Base of the wire shapes, left out of the cyclic garbage collector.

    They never form reference cycles, and the collector's passes would otherwise grow with every
    object of a large cluster.
    """


class ListMeta(Wire):
    """``metadata`` of a list: where the next page starts, and the list's version."""

    continue_: str | None = msgspec.field(default=None, name="continue")
    resource_version: str | None = msgspec.field(default=None, name="resourceVersion")


class OwnerReference(Wire):
    """One ``metadata.ownerReferences`` entry."""

    kind: str | None = None
    name: str | None = None
    controller: bool | None = None


class ObjectMeta(Wire):
    """``metadata`` of an object."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = msgspec.field(default=None, name="resourceVersion")
    creation_timestamp: str | None = msgspec.field(default=None, name="creationTimestamp")
    deletion_timestamp: str | None = msgspec.field(default=None, name="deletionTimestamp")
    owner_references: list[OwnerReference] | None = msgspec.field(
        default=None, name="ownerReferences"
    )
    labels: msgspec.Raw = ABSENT
    annotations: msgspec.Raw = ABSENT
    """Both read only when a family asks, and then only the keys it asks for: a pod's
    annotations alone can be kilobytes."""


class ClassAnnotations(Wire):
    """The one annotation of a DeviceClass the families read: what a device of it costs."""

    hourly_cost: str | None = msgspec.field(default=None, name="hourly-cost")


# --- ResourceClaim ---------------------------------------------------------------------------


class Subrequest(Wire):
    """One ``spec.devices.requests[].firstAvailable`` alternative."""

    name: str | None = None
    device_class_name: str | None = msgspec.field(default=None, name="deviceClassName")
    allocation_mode: str | None = msgspec.field(default=None, name="allocationMode")
    count: int | None = None
    selectors: list[Selector] | None = None
    tolerations: msgspec.Raw = ABSENT
    capacity: msgspec.Raw = ABSENT
    """``capacity.requests``: what the request consumes of a device allowing several."""


class ExactRequest(Wire):
    """``spec.devices.requests[].exactly``."""

    device_class_name: str | None = msgspec.field(default=None, name="deviceClassName")
    allocation_mode: str | None = msgspec.field(default=None, name="allocationMode")
    count: int | None = None
    admin_access: bool | None = msgspec.field(default=None, name="adminAccess")
    selectors: list[Selector] | None = None
    tolerations: msgspec.Raw = ABSENT
    capacity: msgspec.Raw = ABSENT
    """``capacity.requests``: what the request consumes of a device allowing several."""


class Request(Wire):
    """One ``spec.devices.requests`` entry: exactly one way, or alternatives."""

    name: str | None = None
    exactly: ExactRequest | None = None
    first_available: list[Subrequest] | None = msgspec.field(default=None, name="firstAvailable")


class DeviceClaim(Wire):
    """``spec.devices``."""

    requests: list[Request] | None = None


class ClaimSpec(Wire):
    """``spec`` of a ResourceClaim."""

    devices: DeviceClaim | None = None


class DeviceResult(Wire):
    """One ``status.allocation.devices.results`` entry."""

    request: str | None = None
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    admin_access: Any = msgspec.field(default=None, name="adminAccess")
    share_id: Any = msgspec.field(default=None, name="shareID")
    consumed_capacity: msgspec.Raw = msgspec.field(default=ABSENT, name="consumedCapacity")
    tolerations: msgspec.Raw = ABSENT
    """The request's tolerations, copied by the scheduler (the eviction controller reads them)."""
    binding_conditions: msgspec.Raw = msgspec.field(default=ABSENT, name="bindingConditions")
    """The device's binding conditions, copied by the scheduler from the slice (gated:
    DRADeviceBindingConditions): it binds the pod once the driver sets each True."""
    binding_failure_conditions: msgspec.Raw = msgspec.field(
        default=ABSENT, name="bindingFailureConditions"
    )
    """The device's binding failure conditions, copied alike: one True fails the binding."""


class DeviceAllocation(Wire):
    """``status.allocation.devices``."""

    results: list[DeviceResult] | None = None


class Allocation(Wire):
    """``status.allocation``: absent while the claim is pending."""

    devices: DeviceAllocation | None = None
    node_selector: msgspec.Raw = msgspec.field(default=ABSENT, name="nodeSelector")
    """Where a pod using the claim may run (see dra/nodeselector)."""
    allocation_timestamp: Any = msgspec.field(default=None, name="allocationTimestamp")
    """When the scheduler allocated (gated: DRADeviceBindingConditions; not always set)."""


class Consumer(Wire):
    """One ``status.reservedFor`` entry."""

    api_group: str | None = msgspec.field(default=None, name="apiGroup")
    resource: str | None = None
    name: str | None = None
    uid: str | None = None


class ClaimStatus(Wire):
    """``status`` of a ResourceClaim."""

    allocation: Allocation | None = None
    reserved_for: list[Consumer] | None = msgspec.field(default=None, name="reservedFor")
    devices: msgspec.Raw = ABSENT
    """``status.devices``: per-device conditions written by drivers (gated)."""


class ResourceClaim(Wire):
    """A ResourceClaim."""

    metadata: ObjectMeta | None = None
    spec: ClaimSpec | None = None
    status: ClaimStatus | None = None


# --- ResourceSlice ---------------------------------------------------------------------------


class Device(Wire):
    """One device of a ResourceSlice.

    Attributes and capacities stay undecoded (``Raw``) until read: a device publishes a dozen
    of them and the metrics read a few.
    """

    name: str | None = None
    attributes: dict[str, msgspec.Raw] | None = None
    capacity: dict[str, msgspec.Raw] | None = None
    node_name: str | None = msgspec.field(default=None, name="nodeName")
    node_selector: msgspec.Raw = msgspec.field(default=ABSENT, name="nodeSelector")
    """Under ``perDeviceNodeSelection``: the nodes the device serves (see dra/nodeselector)."""
    all_nodes: bool | None = msgspec.field(default=None, name="allNodes")
    taints: msgspec.Raw = ABSENT
    consumes_counters: msgspec.Raw = msgspec.field(default=ABSENT, name="consumesCounters")
    allow_multiple_allocations: Any = msgspec.field(default=None, name="allowMultipleAllocations")


class Pool(Wire):
    """``spec.pool``."""

    name: str | None = None
    generation: Any = None
    resource_slice_count: Any = msgspec.field(default=None, name="resourceSliceCount")


class SliceSpec(Wire):
    """``spec`` of a ResourceSlice."""

    driver: str | None = None
    pool: Pool | None = None
    node_name: str | None = msgspec.field(default=None, name="nodeName")
    node_selector: msgspec.Raw = msgspec.field(default=ABSENT, name="nodeSelector")
    """The nodes the slice's devices serve (a multi-host pool; see dra/nodeselector)."""
    all_nodes: bool | None = msgspec.field(default=None, name="allNodes")
    per_device_node_selection: bool | None = msgspec.field(
        default=None, name="perDeviceNodeSelection"
    )
    devices: list[Device] | None = None
    shared_counters: msgspec.Raw = msgspec.field(default=ABSENT, name="sharedCounters")


class ResourceSlice(Wire):
    """A ResourceSlice."""

    metadata: ObjectMeta | None = None
    spec: SliceSpec | None = None


# --- DeviceClass -----------------------------------------------------------------------------


class CELSelector(Wire):
    """``cel`` of a selector."""

    expression: str | None = None


class Selector(Wire):
    """One ``spec.selectors`` entry."""

    cel: CELSelector | None = None


class ClassSpec(Wire):
    """``spec`` of a DeviceClass."""

    selectors: list[Selector] | None = None
    extended_resource_name: Any = msgspec.field(default=None, name="extendedResourceName")


class DeviceClass(Wire):
    """A DeviceClass."""

    metadata: ObjectMeta | None = None
    spec: ClassSpec | None = None


# --- DeviceTaintRule -------------------------------------------------------------------------


class TaintSelector(Wire):
    """``spec.deviceSelector`` of a DeviceTaintRule."""

    driver: str | None = None
    pool: str | None = None
    device: str | None = None


class DeviceTaint(Wire):
    """A taint: ``key``, ``value``, ``effect`` and when it was added."""

    key: str | None = None
    value: str | None = None
    effect: str | None = None
    time_added: Any = msgspec.field(default=None, name="timeAdded")


class TaintRuleSpec(Wire):
    """``spec`` of a DeviceTaintRule."""

    device_selector: TaintSelector | None = msgspec.field(default=None, name="deviceSelector")
    taint: DeviceTaint | None = None


class TaintRuleStatus(Wire):
    """``status`` of a DeviceTaintRule: its conditions, read one at a time."""

    conditions: msgspec.Raw = ABSENT


class DeviceTaintRule(Wire):
    """A DeviceTaintRule (``v1beta2`` in 1.36, ``v1`` from 1.37)."""

    metadata: ObjectMeta | None = None
    spec: TaintRuleSpec | None = None
    status: TaintRuleStatus | None = None


# --- Pod (core/v1), opt-in -------------------------------------------------------------------


class PodClaim(Wire):
    """One ``spec.resourceClaims`` entry: a claim by name, or made from a template."""

    name: str | None = None
    resource_claim_name: str | None = msgspec.field(default=None, name="resourceClaimName")
    resource_claim_template_name: str | None = msgspec.field(
        default=None, name="resourceClaimTemplateName"
    )


class ContainerResources(Wire):
    """``resources`` of a container: requests and limits, quantities as text."""

    requests: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None


class Container(Wire):
    """A container: its name and what it requests."""

    name: str | None = None
    resources: ContainerResources | None = None


class NodeAffinity(Wire):
    """``spec.affinity.nodeAffinity``: its required part (see dra/nodeselector)."""

    required: msgspec.Raw = msgspec.field(
        default=ABSENT, name="requiredDuringSchedulingIgnoredDuringExecution"
    )


class Affinity(Wire):
    """``spec.affinity``, as far as nodes go."""

    node_affinity: NodeAffinity | None = msgspec.field(default=None, name="nodeAffinity")


class PodSpec(Wire):
    """``spec`` of a Pod, as far as devices go, and which nodes it may run on."""

    node_name: str | None = msgspec.field(default=None, name="nodeName")
    node_selector: dict[str, str] | None = msgspec.field(default=None, name="nodeSelector")
    affinity: Affinity | None = None
    resource_claims: list[PodClaim] | None = msgspec.field(default=None, name="resourceClaims")
    containers: list[Container] | None = None
    init_containers: list[Container] | None = msgspec.field(default=None, name="initContainers")


class PodCondition(Wire):
    """One ``status.conditions`` entry."""

    type: str | None = None
    status: str | None = None
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = msgspec.field(default=None, name="lastTransitionTime")


class ClaimStatusEntry(Wire):
    """One ``status.resourceClaimStatuses`` entry: the claim made for a template."""

    name: str | None = None
    resource_claim_name: str | None = msgspec.field(default=None, name="resourceClaimName")


class ResourceHealth(Wire):
    """One device of an ``allocatedResourcesStatus`` entry and its health."""

    resource_id: str | None = msgspec.field(default=None, name="resourceID")
    health: str | None = None


class ResourceStatus(Wire):
    """One ``allocatedResourcesStatus`` entry: ``claim:<claim>[/<request>]`` and its devices."""

    name: str | None = None
    resources: list[ResourceHealth] | None = None


class ContainerState(Wire):
    """``state`` of a container: whether it runs or ran (``waiting`` is neither)."""

    running: msgspec.Raw = ABSENT
    terminated: msgspec.Raw = ABSENT


class ContainerStatus(Wire):
    """A container's status, as far as device health and starting go."""

    name: str | None = None
    state: ContainerState | None = None
    allocated_resources_status: list[ResourceStatus] | None = msgspec.field(
        default=None, name="allocatedResourcesStatus"
    )


class ExtendedClaimStatus(Wire):
    """``status.extendedResourceClaimStatus``: the claim the scheduler made at binding."""

    resource_claim_name: str | None = msgspec.field(default=None, name="resourceClaimName")


class PodStatus(Wire):
    """``status`` of a Pod, as far as devices go."""

    phase: str | None = None
    conditions: list[PodCondition] | None = None
    resource_claim_statuses: list[ClaimStatusEntry] | None = msgspec.field(
        default=None, name="resourceClaimStatuses"
    )
    container_statuses: list[ContainerStatus] | None = msgspec.field(
        default=None, name="containerStatuses"
    )
    init_container_statuses: list[ContainerStatus] | None = msgspec.field(
        default=None, name="initContainerStatuses"
    )
    extended_resource_claim_status: ExtendedClaimStatus | None = msgspec.field(
        default=None, name="extendedResourceClaimStatus"
    )


class Pod(Wire):
    """A Pod, reduced to its claims, requests, node, conditions, containers' start and health."""

    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None
    status: PodStatus | None = None


# --- Node ------------------------------------------------------------------------------------


class NodeMeta(Wire):
    """``metadata`` of a Node: its name and labels (node selectors read them)."""

    name: str | None = None
    uid: str | None = None
    resource_version: str | None = msgspec.field(default=None, name="resourceVersion")
    labels: dict[str, str] | None = None


class NodeSpec(Wire):
    """``spec`` of a Node, as far as where pods may go."""

    unschedulable: Any = None


class NodeCondition(Wire):
    """One ``status.conditions`` entry of a Node."""

    type: str | None = None
    status: str | None = None


class NodeStatus(Wire):
    """``status`` of a Node: its conditions (``Ready``)."""

    conditions: list[NodeCondition] | None = None


class Node(Wire):
    """A Node, reduced to its name, labels, ``spec.unschedulable`` and ``Ready`` condition."""

    metadata: NodeMeta | None = None
    spec: NodeSpec | None = None
    status: NodeStatus | None = None


class Page(Wire):
    """One page of a list, its objects left undecoded: each is decoded only if it changed."""

    metadata: ListMeta | None = None
    items: list[msgspec.Raw] | None = None


class IdentityMeta(Wire):
    """The part of ``metadata`` that says which object it is and whether it changed."""

    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = msgspec.field(default=None, name="resourceVersion")


class Identity(Wire):
    """The part of an object that says which it is and whether it changed.

    Read of every object of every list, changed or not: nothing more is decoded (a pod's
    labels, annotations and owners would double its cost).
    """

    kind: str | None = None
    """Sent on watch events (list items leave it out): an object of another kind is refused."""
    metadata: IdentityMeta | None = None


IDENTITY = msgspec.json.Decoder(Identity)
"""Decodes an object's :class:`Identity`, once an object (and once a watch event)."""


class BookmarkMeta(Wire):
    """``metadata`` of a bookmark."""

    resource_version: str | None = msgspec.field(default=None, name="resourceVersion")
    annotations: dict[str, str | None] | None = None


class Bookmark(Wire):
    """A watch's ``BOOKMARK`` object: its version, and what ends a streaming list's first events."""

    metadata: BookmarkMeta | None = None


class WatchEvent(Wire):
    """One line of a watch, its object (a Status for ``ERROR``) left undecoded.

    The type is ``ADDED``, ``MODIFIED``, ``DELETED``, ``BOOKMARK`` or ``ERROR``.
    """

    type: str | None = None
    object: msgspec.Raw = ABSENT
