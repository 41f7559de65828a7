"""DRA objects reduced to metric samples.

The ``resource.k8s.io/v1`` shapes below name only the fields the metrics read; every other field
is skipped by the decoder, and every field may be absent or null (1.34 sends ``"devices": null``).
The reduction follows the original's rules (which claim, consumer and device yields which sample)
with two improvements: an attribute is found under ``name`` or ``<driver>/<name>``, and duplicate
samples are dropped when the exposition is written instead of failing the scrape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs
import msgspec

from kdraexp import metrics
from kdraexp.metrics import Samples
from kdraexp.quantity import QuantityError, parse_quantity

# ---------------------------------------------------------------------------------------------
# Wire shapes (only what the metrics need).


class Wire(msgspec.Struct, gc=False):
    """Base of the wire shapes, left out of the cyclic garbage collector.

    They never form reference cycles, and the collector's passes would otherwise grow with every
    object of a large cluster.
    """


class ListMeta(Wire):
    """``metadata`` of a list: where the next page starts."""

    continue_: str | None = msgspec.field(default=None, name="continue")


class ObjectMeta(Wire):
    """``metadata`` of an object."""

    name: str | None = None
    namespace: str | None = None


class AnnotatedMeta(ObjectMeta):
    """``metadata`` of a DeviceClass, whose annotations carry the hourly cost."""

    annotations: dict[str, str | None] | None = None


class DeviceResult(Wire):
    """One ``status.allocation.devices.results`` entry."""

    driver: str | None = None
    pool: str | None = None
    device: str | None = None


class DeviceAllocation(Wire):
    """``status.allocation.devices``."""

    results: list[DeviceResult] | None = None


class Allocation(Wire):
    """``status.allocation``: absent while the claim is pending."""

    devices: DeviceAllocation | None = None


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


class ResourceClaim(Wire):
    """A ResourceClaim."""

    metadata: ObjectMeta | None = None
    status: ClaimStatus | None = None


class AttributeValue(Wire):
    """A device attribute: only string values become labels."""

    string: str | None = None


class CapacityValue(Wire):
    """A device capacity: a Kubernetes quantity."""

    value: str | None = None


class Device(Wire):
    """One device of a ResourceSlice.

    Attributes and capacities stay undecoded (``Raw``) until read: a device publishes a dozen
    of them and the metrics read at most six.
    """

    name: str | None = None
    attributes: dict[str, msgspec.Raw] | None = None
    capacity: dict[str, msgspec.Raw] | None = None
    node_name: str | None = msgspec.field(default=None, name="nodeName")


class Pool(Wire):
    """``spec.pool``."""

    name: str | None = None


class SliceSpec(Wire):
    """``spec`` of a ResourceSlice."""

    driver: str | None = None
    pool: Pool | None = None
    node_name: str | None = msgspec.field(default=None, name="nodeName")
    per_device_node_selection: bool | None = msgspec.field(
        default=None, name="perDeviceNodeSelection"
    )
    devices: list[Device] | None = None


class ResourceSlice(Wire):
    """A ResourceSlice."""

    metadata: ObjectMeta | None = None
    spec: SliceSpec | None = None


class DeviceClass(Wire):
    """A DeviceClass."""

    metadata: AnnotatedMeta | None = None


Item = TypeVar("Item", ResourceClaim, ResourceSlice, DeviceClass)


class ObjectList(Wire, Generic[Item]):
    """One page of a list."""

    metadata: ListMeta | None = None
    items: list[Item] | None = None


# ---------------------------------------------------------------------------------------------
# Reduction.


def reduce_claims(claims: list[ResourceClaim], out: Samples) -> list[str]:
    """Add the three claim families' samples for *claims* to *out*; nothing in them is refused."""
    allocated, reserved, total = (
        metrics.ALLOCATED_DEVICE,
        metrics.RESERVED_FOR_POD,
        metrics.RESERVED_TOTAL,
    )
    for claim in claims:
        meta = claim.metadata or ObjectMeta()
        name, namespace = meta.name or "", meta.namespace or ""
        status = claim.status or ClaimStatus()
        allocation = status.allocation
        if allocation is not None and allocation.devices is not None:
            for result in allocation.devices.results or ():
                labels = allocated.render(
                    name, namespace, result.pool or "", result.device or "", result.driver or ""
                )
                out.add(allocated, labels, 1.0)
        pods = 0
        for consumer in status.reserved_for or ():
            if consumer.resource != "pods" or consumer.api_group:
                continue
            pods += 1
            labels = reserved.render(name, namespace, consumer.name or "", consumer.uid or "")
            out.add(reserved, labels, 1.0)
        out.add(total, total.render(name, namespace), float(pods))
    return []


def reduce_slices(slices: list[ResourceSlice], out: Samples) -> list[str]:
    """Add the capacity families' samples for *slices* to *out*; return what could not be read."""
    problems: list[str] = []
    capacity_families = metrics.CAPACITY_FAMILIES.items()
    for resource_slice in slices:
        slice_name = (resource_slice.metadata or ObjectMeta()).name or ""
        spec = resource_slice.spec or SliceSpec()
        driver = spec.driver or ""
        pool = (spec.pool or Pool()).name or ""
        per_device = spec.per_device_node_selection is True
        for device in spec.devices or ():
            capacity = device.capacity
            if not capacity:
                continue
            values = []
            for key, family in capacity_families:
                raw = capacity.get(key)
                if raw is None:
                    continue
                try:
                    values.append((family, parse_quantity(_capacity_value(raw))))
                except (QuantityError, msgspec.ValidationError) as error:
                    problems.append(
                        f"ResourceSlice {slice_name} device {device.name or ''} "
                        f"capacity {key}: {error}"
                    )
            if not values:
                continue
            attributes = device.attributes or {}
            labels = metrics.CAPACITY_MEMORY.render(
                slice_name,
                device.name or "",
                driver,
                pool,
                (device.node_name if per_device else spec.node_name) or "",
                string_attribute(attributes, driver, "type"),
                string_attribute(attributes, driver, "productName"),
                string_attribute(attributes, driver, "parentUUID"),
            )
            for family, value in values:
                out.add(family, labels, value)
    return problems


_ATTRIBUTE = msgspec.json.Decoder(AttributeValue | None)
_CAPACITY = msgspec.json.Decoder(CapacityValue | None)


def _capacity_value(raw: msgspec.Raw) -> str:
    capacity = _CAPACITY.decode(raw)
    return (capacity.value if capacity is not None else None) or ""


def string_attribute(attributes: dict[str, msgspec.Raw], driver: str, name: str) -> str:
    """The string value of attribute *name*, given bare or qualified with the driver's domain.

    A name without a domain is in the driver's domain, so ``productName`` and
    ``gpu.nvidia.com/productName`` are the same attribute of a ``gpu.nvidia.com`` device.
    Attributes of another kind (int, bool, version) give "".
    """
    for key in (name, f"{driver}/{name}"):
        raw = attributes.get(key)
        if raw is None:
            continue
        try:
            attribute = _ATTRIBUTE.decode(raw)
        except msgspec.ValidationError:
            continue
        if attribute is not None and attribute.string is not None:
            return attribute.string
    return ""


def reduce_classes(classes: list[DeviceClass], out: Samples) -> list[str]:
    """Add the hourly-cost samples for *classes* to *out*; return the annotations refused."""
    problems: list[str] = []
    for device_class in classes:
        meta = device_class.metadata or AnnotatedMeta()
        raw = (meta.annotations or {}).get(HOURLY_COST_ANNOTATION)
        if raw is None:
            continue
        name = meta.name or ""
        try:
            cost = parse_hourly_cost(raw)
        except ValueError as error:
            problems.append(
                f"Error parsing '{HOURLY_COST_ANNOTATION}' ({raw}) on DeviceClass {name}: {error}"
            )
            continue
        out.add(metrics.HOURLY_COST, metrics.HOURLY_COST.render(name), cost)
    return problems


# ---------------------------------------------------------------------------------------------
# The three kinds.


@attrs.define
class ListResult:
    """What one list produced: samples, how many objects were read, what was refused."""

    samples: Samples = attrs.Factory(Samples)
    objects: int = 0
    problems: list[str] = attrs.Factory(list)


@attrs.frozen
class Kind:
    """One of the three listed resources and how its objects become samples."""

    plural: str
    kind: str
    item_type: type[Any]
    reducer: Callable[[list[Any], Samples], list[str]]
    decoder: msgspec.json.Decoder[Any] = attrs.field(init=False, eq=False, repr=False)
    """Decodes one page (a list) of this kind."""
    item_decoder: msgspec.json.Decoder[Any] = attrs.field(init=False, eq=False, repr=False)
    """Decodes one object of this kind."""

    def __attrs_post_init__(self) -> None:
        decoder = msgspec.json.Decoder(ObjectList[self.item_type])  # type: ignore[name-defined]
        object.__setattr__(self, "decoder", decoder)
        object.__setattr__(self, "item_decoder", msgspec.json.Decoder(self.item_type))

    def reduce(self, items: list[Any], result: ListResult) -> None:
        """Reduce one page's *items* into *result*."""
        result.objects += len(items)
        result.problems.extend(self.reducer(items, result.samples))


RESOURCE_CLAIMS = Kind("resourceclaims", "ResourceClaim", ResourceClaim, reduce_claims)
RESOURCE_SLICES = Kind("resourceslices", "ResourceSlice", ResourceSlice, reduce_slices)
DEVICE_CLASSES = Kind("deviceclasses", "DeviceClass", DeviceClass, reduce_classes)
KINDS = (RESOURCE_CLAIMS, RESOURCE_SLICES, DEVICE_CLASSES)


# ---------------------------------------------------------------------------------------------
# hourly-cost.

HOURLY_COST_ANNOTATION = "hourly-cost"

# Go's unicode.IsSpace set, which strings.TrimSpace trims.  Python's str.strip() also trims
# U+001C..U+001F, which Go keeps, so the set is spelled out.
_GO_WHITESPACE = (
    "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


def parse_hourly_cost(raw: str) -> float:
    """Parse an ``hourly-cost`` annotation: a non-negative decimal with a dot separator.

    :raises ValueError: with the original's message, for anything else.
    """
    text = raw.strip(_GO_WHITESPACE)
    if not _DECIMAL.fullmatch(text):
        raise ValueError("expected a non-negative decimal with a dot separator")
    cost = float(text)
    if not math.isfinite(cost):
        raise ValueError("hourly cost is outside the finite float64 range")
    return cost
