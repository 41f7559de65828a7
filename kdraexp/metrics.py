"""The metric contract: the seven DRA families, defined once, and their samples.

Names, help texts, label names and types are those of the Go original, so dashboards written for
it keep working.  Label values are rendered into the exposition's ``{name="value",...}`` form
when a sample is made: a scrape then holds one short string per sample instead of a tuple of
label values, and writing the exposition is string concatenation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import attrs


@attrs.frozen
class Family:
    """One metric family: all of the original's families are gauges."""

    name: str
    help: str
    labels: tuple[str, ...]
    """Label names in the order the original declares them."""

    @property
    def sorted_labels(self) -> tuple[str, ...]:
        """Label names in the order they are written: alphabetical, as the original prints them."""
        return tuple(sorted(self.labels))


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


def render_labels(labels: dict[str, str]) -> str:
    """Render ``{a="x",b="y"}`` with the names in alphabetical order."""
    inner = ",".join(f'{name}="{escape_label_value(labels[name])}"' for name in sorted(labels))
    return "{" + inner + "}"


Sample = tuple[str, float]
"""A rendered label set and the sample's value."""


class Samples:
    """Samples collected for the seven families, each family a list of (labels, value)."""

    __slots__ = ("by_family",)

    def __init__(self) -> None:
        self.by_family: dict[str, list[Sample]] = {family.name: [] for family in FAMILIES}

    def add(self, family: Family, labels: str, value: float) -> None:
        """Add one sample whose labels were rendered with :func:`render_labels`."""
        self.by_family[family.name].append((labels, value))

    def update(self, other: Samples) -> None:
        """Add every sample of *other*."""
        for name, samples in other.by_family.items():
            self.by_family[name].extend(samples)

    def __len__(self) -> int:
        return sum(len(samples) for samples in self.by_family.values())

    def families(self) -> Iterator[tuple[Family, list[Sample]]]:
        """Yield each family with its samples sorted by labels and identical label sets dropped.

        Two samples with the same name and labels make an invalid exposition; the original fails
        the whole scrape on them.  Here the first one collected is kept.
        """
        for family in FAMILIES:
            samples = self.by_family[family.name]
            if samples:
                yield family, list(_unique_sorted(samples))


def _unique_sorted(samples: Iterable[Sample]) -> Iterator[Sample]:
    previous = None
    for sample in sorted(samples, key=lambda sample: sample[0]):
        if sample[0] != previous:
            previous = sample[0]
            yield sample
