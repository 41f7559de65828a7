"""ResourceSlice families: the devices drivers publish, their capacities, taints and counters.

Device families count only slices of their pool's current generation (the highest
``spec.pool.generation`` among its slices), except the original's three capacity families, which
report every generation as the original does.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import msgspec

from kdraexp.allocator.facts import DeviceFacts, SliceFacts
from kdraexp.allocator.index import ClusterIndex
from kdraexp.allocator.join import pool_key
from kdraexp.allocator.scopes import Per
from kdraexp.cel.device import CAPACITY_JSON, SelectorView, attribute_json
from kdraexp.dra import gated, wire
from kdraexp.dra.listing import DEVICE_CLASSES, RESOURCE_CLAIMS, RESOURCE_SLICES
from kdraexp.families.context import Context
from kdraexp.families.family import CLUSTER, Row, Stability, family
from kdraexp.families.kind import KindSpec, ShardKey
from kdraexp.families.metadata import Named, metadata_families
from kdraexp.util.labels import LabelGroup

D = LabelGroup(("resourceslice_name", "driver", "pool", "device_name", "node_name"))
"""The device labels every device family leads with."""

_RESOURCE = RESOURCE_SLICES.plural
T = TypeVar("T")


def string_attribute(attributes: dict[str, msgspec.Raw], driver: str, name: str) -> str:
    """The string value of attribute *name*, given bare or qualified with the driver's domain.

    A name without a domain is in the driver's domain, so ``productName`` and
    ``gpu.nvidia.com/productName`` are the same attribute of a ``gpu.nvidia.com`` device.
    Attributes of another kind (int, bool, version) give "".
    """
    raw = attributes.get(name)  # the qualified key made only when the bare one gives nothing
    found = None if raw is None else _string(raw)
    if found is None:
        raw = attributes.get(f"{driver}/{name}")
        found = None if raw is None else _string(raw)
    return found or ""


def _string(raw: msgspec.Raw) -> str | None:
    value = attribute_json(bytes(raw))
    if value is not None and isinstance(value.get("string"), str):
        return str(value["string"])
    return None


class DeviceView(SelectorView):
    """One device of a slice, with what several families read besides the selectors."""

    __slots__ = (
        "_capacities",
        "_classes",
        "_consumes",
        "_defaults",
        "_policies",
        "_strings",
        "_taints",
        "labels",
        "node_name",
        "node_selector",
    )

    def __init__(self, device: wire.Device, view: SliceView) -> None:
        self.wire = device
        self.name = device.name or ""
        self.driver = view.driver
        self.node_name = (device.node_name if view.per_device else view.node_name) or ""
        self.node_selector = (
            view.context.node_selector(
                device.node_selector, _RESOURCE, f"{view.where} device {self.name}"
            )
            if view.per_device
            else None
        )
        """Its own node selector (per-device node selection); the slice's is the slice's."""
        self.labels = D.values(view.name, view.driver, view.pool, self.name, self.node_name)
        self.attributes = device.attributes or {}
        self.capacity_raw = device.capacity or {}
        self.allow_multiple_allocations = device.allow_multiple_allocations is True
        self._capacities: dict[str, float] | None = None
        self._defaults: dict[str, float] = {}
        self._policies: dict[str, gated.RequestPolicy] | None = None
        self._classes: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._taints: list[tuple[str, str, str, float | None]] | None = None
        self._consumes: tuple[tuple[str, dict[str, float]], ...] | None = None
        self._strings: dict[str, str] = {}

    def taints(self, context: Context, where: str) -> list[tuple[str, str, str, float | None]]:
        """The device's taints as (key, value, effect, time added); bad ones reported once."""
        if self._taints is None:
            self._taints = gated.taints(
                self.wire.taints, context.problems, _RESOURCE, f"{where} device {self.name}"
            )
        return self._taints

    def consumes(self, context: Context, where: str) -> tuple[tuple[str, dict[str, float]], ...]:
        """The counters the device consumes, by counter set; unreadable ones reported once."""
        if self._consumes is None:
            self._consumes = gated.counter_sets(
                self.wire.consumes_counters,
                "counterSet",
                context.problems,
                _RESOURCE,
                f"{where} device {self.name}",
            )
        return self._consumes

    def string_attribute(self, name: str) -> str:
        """A string attribute by the original's rule (bare or in the driver's domain)."""
        value = self._strings.get(name)
        if value is None:
            value = self._strings[name] = string_attribute(self.attributes, self.driver, name)
        return value

    def first_string_attribute(self, *names: str) -> str:
        """The first of *names* the device has as a string attribute."""
        for name in names:
            value = self.string_attribute(name)
            if value:
                return value
        return ""

    def attribute_text(self, domain: str | None, name: str) -> str:
        """An attribute of any kind as label text; *domain* None is the driver's."""
        for key in self._key(domain or self.driver, name):
            raw = self.attributes.get(key)
            if raw is not None:
                text = gated.attribute_text(attribute_json(bytes(raw)))
                if text is not None:
                    return text
        return ""

    def capacities(self, context: Context, where: str) -> dict[str, float]:
        """Every capacity as a float; those that are not quantities are reported once."""
        if self._capacities is None:
            found = {}
            for key, raw in self.capacity_raw.items():
                try:
                    capacity = CAPACITY_JSON.decode(raw)
                    name = sys.intern(key)
                    found[name] = gated.quantity(capacity.value if capacity else None)
                    if capacity is not None and capacity.request_policy is not None:
                        policy = gated.request_policy(capacity.request_policy, found[name])
                        self._read_policy(name, policy)
                except (msgspec.ValidationError, gated.Unreadable) as error:
                    context.problems.add(
                        _RESOURCE, "capacity", f"{where} device {self.name} capacity {key}: {error}"
                    )
            self._capacities = found
        return self._capacities

    def _read_policy(self, name: str, policy: gated.RequestPolicy) -> None:
        if policy.default is not None:
            self._defaults[name] = policy.default
        if policy.rounds:
            if self._policies is None:
                self._policies = {}
            self._policies[name] = policy

    def defaults(self, context: Context, where: str) -> dict[str, float]:
        """What a request naming no capacity consumes of each: the policy's default, else all."""
        capacities = self.capacities(context, where)
        return {name: self._defaults.get(name, value) for name, value in capacities.items()}

    def policies(self, context: Context, where: str) -> dict[str, gated.RequestPolicy] | None:
        """The request policies that round or refuse what a request asks, by capacity."""
        self.capacities(context, where)
        return self._policies

    def classes(self, context: Context) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(the classes the device satisfies, those whose match could not be decided).

        Matched once for every family; the undecided ones are reported once.
        """
        if self._classes is None:
            errors: list[tuple[str, str]] = []
            found = context.classes.matching(self, errors)
            context.class_errors.extend(errors)
            unsure = [name for name, _ in errors]
            unmatched = context.classes.unmatched()
            if unmatched:  # left out of the collection: neither matched nor not
                unsure += [name for name in unmatched if name not in found]
            self._classes = (_shared(tuple(found)), _shared(tuple(unsure)))
        return self._classes

    def named_capacity(self, context: Context, where: str, name: str) -> float | None:
        """A capacity by name, bare or in the driver's domain."""
        capacities = self.capacities(context, where)
        value = capacities.get(name)
        return value if value is not None else capacities.get(f"{self.driver}/{name}")


_TUPLES: dict[tuple[str, ...], tuple[str, ...]] = {}


def _shared(names: tuple[str, ...]) -> tuple[str, ...]:
    """One tuple object for equal tuples of class names: devices repeat a handful of them."""
    if len(_TUPLES) >= 4096:
        _TUPLES.clear()
    return _TUPLES.setdefault(names, names)


class SliceView:
    """One ResourceSlice, read once for all its families."""

    __slots__ = (
        "all_nodes",
        "context",
        "devices",
        "driver",
        "generation",
        "name",
        "node_name",
        "node_selector",
        "per_device",
        "pool",
        "shared_counters",
        "slice_count",
        "where",
        "wire",
    )

    def __init__(self, item: wire.ResourceSlice, context: Context) -> None:
        spec = item.spec or wire.SliceSpec()
        pool = spec.pool or wire.Pool()
        self.wire = item
        self.context = context
        self.name = (item.metadata or wire.ObjectMeta()).name or ""
        self.where = f"ResourceSlice {self.name}"
        self.driver = sys.intern(spec.driver or "")
        self.pool = pool.name or ""
        self.generation = gated.integer(pool.generation)
        self.slice_count = gated.integer(pool.resource_slice_count)
        self.node_name = spec.node_name or ""
        self.all_nodes = spec.all_nodes is True
        self.per_device = spec.per_device_node_selection is True
        self.node_selector = context.node_selector(spec.node_selector, _RESOURCE, self.where)
        """The nodes a multi-host pool's devices serve (``spec.nodeSelector``)."""
        self.devices = [DeviceView(device, self) for device in spec.devices or ()]
        context.classes.prepare(self.devices)  # one evaluation request for the whole slice
        self.shared_counters = gated.counter_sets(
            spec.shared_counters, "name", context.problems, _RESOURCE, self.where
        )

    def facts(self) -> SliceFacts:
        """What the pool, state and cost families need of this slice."""
        context, where = self.context, self.where
        share = context.options.cost_share_capacity
        devices = []
        for device in self.devices:
            shareable = device.allow_multiple_allocations
            classes, unsure = device.classes(context)
            taints = device.taints(context, where)
            devices.append(
                DeviceFacts(
                    device.labels,
                    device.name,
                    tuple([(k, v, effect) for k, v, effect, _ in taints if effect in _BLOCKING]),
                    device.consumes(context, where),
                    device.named_capacity(context, where, share),
                    shareable,
                    _alike(device.capacities(context, where)) if shareable else None,
                    _alike(device.defaults(context, where)) if shareable else None,
                    classes,
                    unsure,
                    device.node_name,
                    tuple([(k, v, e, t) for k, v, e, t in taints if t is not None]),
                    tuple([(k, v, effect) for k, v, effect, _ in taints]),
                    device.node_selector or self.node_selector,
                    _alike_or_none(device.policies(context, where)) if shareable else None,
                )
            )
        return SliceFacts(
            self.driver,
            self.pool,
            self.generation or 0,
            self.slice_count,
            self.shared_counters,
            tuple(devices),
            name=self.name,
        )


_BLOCKING = frozenset({"NoSchedule", "NoExecute"})


def _alike(values: dict[str, T]) -> Mapping[str, T]:
    """One read-only mapping for equal ones: the shared devices of one model repeat theirs.

    What a request consumes of a shared device is worked out once for all devices alike
    (:func:`kdraexp.allocator.candidates.consumed`), and they hold one mapping.
    """
    return _one_mapping(tuple(values.items()))


def _alike_or_none(values: dict[str, T] | None) -> Mapping[str, T] | None:
    return None if values is None else _alike(values)


@functools.lru_cache(maxsize=1024)
def _one_mapping(items: tuple[tuple[str, Any], ...]) -> Mapping[str, Any]:
    return MappingProxyType(dict(items))


_ORIGINAL_CAPACITY_LABELS = (
    "resourceslice_name",
    "device_name",
    "driver",
    "pool",
    "node_name",
    "type",
    "product_name",
    "parent_uuid",
)
_ORIGINAL_FIELDS = (
    "spec.driver, spec.pool.name, spec.nodeName, spec.perDeviceNodeSelection, spec.devices[].name, "
    "spec.devices[].nodeName, spec.devices[].attributes type/productName/parentUUID, "
    "spec.devices[].capacity.{}"
)


def _original_capacity(name: str, family_name: str, help_text: str) -> Any:
    """One of the original's three families of one capacity, *name*, per device."""

    def rows(view: SliceView) -> Iterator[Row]:
        for device in view.devices:
            if name not in device.capacity_raw:
                continue
            value = device.capacities(view.context, view.where).get(name)
            if value is None:
                continue
            yield (
                view.name,
                device.name,
                view.driver,
                view.pool,
                device.node_name,
                device.string_attribute("type"),
                device.string_attribute("productName"),
                device.string_attribute("parentUUID"),
                value,
            )

    return family(
        family_name,
        help_text,
        _ORIGINAL_CAPACITY_LABELS,
        RESOURCE_SLICES,
        _ORIGINAL_FIELDS.format(name),
        stability=Stability.STABLE,
        original=True,
    )(rows)


capacity_memory_bytes = _original_capacity(
    "memory", "kube_resourceslice_device_capacity_memory_bytes", "Device memory capacity in bytes."
)
capacity_multiprocessors = _original_capacity(
    "multiprocessors",
    "kube_resourceslice_device_capacity_multiprocessors",
    "Number of multiprocessors available on the device.",
)
capacity_decoders = _original_capacity(
    "decoders",
    "kube_resourceslice_device_capacity_decoders",
    "Number of hardware decoders available on the device.",
)


@family(
    "kube_resourceslice_info",
    "Information about a ResourceSlice.",
    ("resourceslice_name", "driver", "pool", "node_name", "all_nodes", "generation"),
    RESOURCE_SLICES,
    "metadata.name, spec.driver, spec.pool.name, spec.pool.generation, spec.nodeName, "
    "spec.allNodes",
)
def slice_info(view: SliceView) -> Iterator[Row]:
    """One row per slice, of every generation."""
    generation = "" if view.generation is None else str(view.generation)
    all_nodes = "true" if view.all_nodes else "false"
    yield (view.name, view.driver, view.pool, view.node_name, all_nodes, generation, 1.0)


@family(
    "kube_resourceslice_device_info",
    "Information about a device a ResourceSlice publishes.",
    (D, "type", "model", "uuid", "parent_uuid"),
    RESOURCE_SLICES,
    "spec.devices[].name, spec.devices[].attributes type/productName/model/uuid/parentUUID "
    "(and those named by --device-attributes)",
    current_generation=True,
)
def device_info(view: SliceView) -> Iterator[Row]:
    """One row per device; ``--device-attributes`` adds ``attribute_<name>`` labels."""
    extras = view.context.options.device_attributes
    for device in view.devices:
        yield (
            device.labels,
            device.string_attribute("type"),
            device.first_string_attribute("productName", "model"),
            device.string_attribute("uuid"),
            device.string_attribute("parentUUID"),
            *(device.attribute_text(extra.domain, extra.name) for extra in extras),
            1.0,
        )


@family(
    "kube_resourceslice_device_capacity",
    "Capacity of a device, one series per capacity it publishes.",
    (D, "capacity"),
    RESOURCE_SLICES,
    "spec.devices[].capacity (names matching --device-capacities)",
    current_generation=True,
)
def device_capacity(view: SliceView) -> Iterator[Row]:
    """Each capacity whose name ``--device-capacities`` accepts, as a float."""
    wanted = view.context.options.capacity_wanted
    for device in view.devices:
        for name, value in device.capacities(view.context, view.where).items():
            if wanted(name):
                yield (device.labels, name, value)


@family(
    "kube_resourceslice_device_taint",
    "A taint on a device: its own, or put on it by a DeviceTaintRule.",
    (D, "key", "value", "effect", "devicetaintrule"),
    CLUSTER,
    "spec.devices[].taints[].{key,value,effect}, DeviceTaintRule spec.deviceSelector and "
    "spec.taint.{key,value,effect} (when listed)",
    needs=(RESOURCE_SLICES,),
    per=Per.POOL,
)
def device_taint(index: ClusterIndex) -> Iterator[Row]:
    """One row per taint of a known effect (None, NoSchedule, NoExecute) of a current device.

    ``devicetaintrule`` is "" for the device's own taint, else the rule that puts it there (one
    row per rule that selects the device).
    """
    for labels, key, value, effect, rule in index.device_taints():
        yield (labels, key, value, effect, rule, 1.0)


@family(
    "kube_resourceslice_device_class",
    "Reports 1 when a device satisfies every CEL selector of a DeviceClass.",
    (D, "deviceclass_name"),
    RESOURCE_SLICES,
    "spec.devices[] (driver, attributes, capacity, allowMultipleAllocations) against "
    "DeviceClass spec.selectors[].cel.expression",
    needs=(DEVICE_CLASSES,),
    current_generation=True,
    evaluates_selectors=True,
)
def device_class(view: SliceView) -> Iterator[Row]:
    """One row per (device, class) that matches."""
    for device in view.devices:
        for name in device.classes(view.context)[0]:
            yield (device.labels, name, 1.0)


@family(
    "kube_resourceslice_shared_quantity",
    "A counter a ResourceSlice shares among the devices of its pool.",
    ("resourceslice_name", "driver", "pool", "counter_set", "counter"),
    RESOURCE_SLICES,
    "spec.sharedCounters[].{name,counters}",
    current_generation=True,
)
def shared_quantity(view: SliceView) -> Iterator[Row]:
    """Each counter of each shared counter set, as a float."""
    for counter_set, counters in view.shared_counters:
        for counter, value in counters.items():
            yield (view.name, view.driver, view.pool, counter_set, counter, value)


@family(
    "kube_resourceslice_device_capacity_available",
    "What a device allowing multiple allocations has left of a capacity.",
    (D, "capacity"),
    CLUSTER,
    "spec.devices[].{allowMultipleAllocations,capacity}, "
    "ResourceClaim status.allocation.devices.results[].consumedCapacity",
    needs=(RESOURCE_SLICES, RESOURCE_CLAIMS),
    per=Per.POOL,
)
def device_capacity_available(index: ClusterIndex) -> Iterator[Row]:
    """The capacity minus what every non-admin result naming the device consumes of it."""
    yield from index.capacity_available()


@family(
    "kube_resourceslice_device_state",
    "Reports 1 for a device's state: allocated, unusable, tainted, blocked or available.",
    (D, "state"),
    CLUSTER,
    "spec.devices[].{taints,consumesCounters}, spec.sharedCounters, "
    "ResourceClaim status.allocation.devices.results[], DeviceTaintRules (when listed)",
    needs=(RESOURCE_SLICES, RESOURCE_CLAIMS),
    per=Per.POOL,
)
def device_state(index: ClusterIndex) -> Iterator[Row]:
    """One row per device of a current generation, in its one state."""
    for labels, state in index.device_states():
        yield (labels, state, 1.0)


@family(
    "kube_resourceslice_device_taint_added_timestamp_seconds",
    "Unix time a taint was put on a device: age is time() minus this.",
    (D, "key", "value", "effect"),
    CLUSTER,
    "spec.devices[].taints[].timeAdded, DeviceTaintRule spec.taint.timeAdded (when listed)",
    needs=(RESOURCE_SLICES,),
    per=Per.POOL,
)
def device_taint_added(index: ClusterIndex) -> Iterator[Row]:
    """The device's own taints, then those of the DeviceTaintRules that select it."""
    yield from index.taint_times()


@family(
    "kube_resourceslice_node_selector_info",
    'The nodes a slice\'s devices (device_name "") or one device serve, when a node selector '
    "says which: terms joined by ||, each term's requirements by a comma.",
    (D, "selector"),
    RESOURCE_SLICES,
    "spec.nodeSelector, spec.devices[].nodeSelector (perDeviceNodeSelection)",
)
def node_selector_info(view: SliceView) -> Iterator[Row]:
    """One row per slice with a node selector, and per device with one of its own."""
    if view.node_selector is not None:
        labels = D.values(view.name, view.driver, view.pool, "", view.node_name)
        yield (labels, view.node_selector.text, 1.0)
    for device in view.devices:
        if device.node_selector is not None:
            yield (device.labels, device.node_selector.text, 1.0)


def _named(view: SliceView) -> Named:
    return (view.name,), view.wire.metadata or wire.ObjectMeta()


slice_labels, slice_annotations = metadata_families(
    RESOURCE_SLICES, ("resourceslice_name",), _named
)

FAMILIES = (
    capacity_memory_bytes,
    capacity_multiprocessors,
    capacity_decoders,
    slice_info,
    device_info,
    device_capacity,
    device_taint,
    device_class,
    shared_quantity,
    device_state,
    device_capacity_available,
    device_taint_added,
    node_selector_info,
    slice_labels,
    slice_annotations,
)


def _slice_facts(view: SliceView, written: bool) -> SliceFacts:
    return view.facts()


def _slice_shard(item: wire.ResourceSlice) -> ShardKey:
    """A slice belongs with its pool: every family of a pool is made within one shard."""
    spec = item.spec
    driver = (spec.driver or "") if spec else ""
    pool = (spec.pool.name or "") if spec and spec.pool else ""
    return ShardKey(pool_key(driver, pool))


def _devices(item: Any) -> int:
    """How many devices a decoded slice lists."""
    return len(item.spec.devices or ()) if item.spec else 0


KIND = KindSpec(
    RESOURCE_SLICES,
    SliceView,
    _slice_facts,
    _slice_shard,
    reads_classes=True,
    keeps_source=True,
    parts=_devices,
)
