"""The metric contract: the seven DRA families, defined once, and their samples.

Names, help texts, label names and types are those of the Go original, so dashboards written for
it keep working.  Label values are rendered into the exposition's ``{name="value",...}`` form
when a sample is made: a scrape then holds one short string per sample instead of a tuple of
label values, and writing the exposition is string concatenation.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs


@attrs.frozen
class Family:
    """One metric family: all of the original's families are gauges."""

    name: str
    help: str
    labels: tuple[str, ...]
    """Label names in the order the original declares them."""
    _template: str = attrs.field(init=False, repr=False, eq=False)
    _order: tuple[int, ...] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        written = sorted(self.labels)  # alphabetical, as the original prints them
        template = "{" + ",".join(f'{name}="%s"' for name in written) + "}"
        object.__setattr__(self, "_template", template)
        object.__setattr__(self, "_order", tuple(self.labels.index(name) for name in written))

    def render(self, *values: str) -> str:
        """Render ``{a="x",b="y"}`` from label values given in the declared order."""
        return self._template % tuple([escape_label_value(values[i]) for i in self._order])


_CAPACITY_LABELS = (
    "resourceslice_name",
    "device_name",
    "driver",
    "pool",
    "node_name",
    "type",
    "product_name",
    "parent_uuid",
)

ALLOCATED_DEVICE = Family(
    "kube_resourceclaim_status_allocated_device",
    "Reports 1 when a specific device is allocated to a ResourceClaim.",
    ("resourceclaim_name", "namespace", "pool", "device_name", "driver"),
)
RESERVED_FOR_POD = Family(
    "kube_resourceclaim_status_reserved_for_pod",
    "Reports 1 when the ResourceClaim is reserved for a specific Pod.",
    ("resourceclaim_name", "namespace", "pod_name", "uid"),
)
RESERVED_TOTAL = Family(
    "kube_resourceclaim_status_reserved_total",
    "Total number of Pods actively reserving this ResourceClaim.",
    ("resourceclaim_name", "namespace"),
)
CAPACITY_MEMORY = Family(
    "kube_resourceslice_device_capacity_memory_bytes",
    "Device memory capacity in bytes.",
    _CAPACITY_LABELS,
)
CAPACITY_MULTIPROCESSORS = Family(
    "kube_resourceslice_device_capacity_multiprocessors",
    "Number of multiprocessors available on the device.",
    _CAPACITY_LABELS,
)
CAPACITY_DECODERS = Family(
    "kube_resourceslice_device_capacity_decoders",
    "Number of hardware decoders available on the device.",
    _CAPACITY_LABELS,
)
HOURLY_COST = Family(
    "kube_deviceclass_hourly_cost",
    "Hourly cost of the DeviceClass resource from its annotations.",
    ("deviceclass_name",),
)

FAMILIES: tuple[Family, ...] = tuple(
    sorted(
        (
            ALLOCATED_DEVICE,
            RESERVED_FOR_POD,
            RESERVED_TOTAL,
            CAPACITY_MEMORY,
            CAPACITY_MULTIPROCESSORS,
            CAPACITY_DECODERS,
            HOURLY_COST,
        ),
        key=lambda family: family.name,
    )
)
"""Every family, in the order they are written: sorted by name, as the original writes them."""

CAPACITY_FAMILIES = {
    "memory": CAPACITY_MEMORY,
    "multiprocessors": CAPACITY_MULTIPROCESSORS,
    "decoders": CAPACITY_DECODERS,
}
"""Capacity name in a ResourceSlice device -> the family that reports it."""


def escape_label_value(value: str) -> str:
    """Escape a label value as the text and OpenMetrics formats require."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


Sample = tuple[str, float]
"""A rendered label set and the sample's value."""


class Samples:
    """Samples collected for the seven families: per family, rendered labels -> value.

    A dict per family rather than a list of pairs: a label set repeated (which would make an
    invalid exposition, and makes the original fail the whole scrape) is kept once, the first
    value collected winning; and strings and floats in a dict are invisible to the cyclic
    garbage collector, whose passes would otherwise grow with every sample.
    """

    __slots__ = ("__weakref__", "by_family")

    def __init__(self) -> None:
        self.by_family: dict[str, dict[str, float]] = {family.name: {} for family in FAMILIES}

    def add(self, family: Family, labels: str, value: float) -> None:
        """Add one sample whose labels were rendered with :meth:`Family.render`."""
        self.by_family[family.name].setdefault(labels, value)

    def update(self, other: Samples) -> None:
        """Add every sample of *other* (taking over its dicts where this one has none)."""
        for name, samples in other.by_family.items():
            mine = self.by_family[name]
            if not mine:
                self.by_family[name] = samples
                continue
            for labels, value in samples.items():
                mine.setdefault(labels, value)

    def families(self) -> Iterator[tuple[Family, list[Sample]]]:
        """Yield each family that has samples, with its samples sorted by labels."""
        for family in FAMILIES:
            samples = self.by_family[family.name]
            if samples:
                yield family, sorted(samples.items())
