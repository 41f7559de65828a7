"""What the families read besides the object: the options, the classes, where problems go."""

from __future__ import annotations

import re

import attrs
import msgspec

from kdraexp.cel.classindex import ClassIndex
from kdraexp.dra import gated, nodeselector, wire
from kdraexp.dra.nodeselector import LabelSelector, NodeSelector
from kdraexp.dra.problems import Problems

DEFAULT_DEVICE_CAPACITIES = r"(?!(.*/)?memorySlice[0-9]+$).*"
"""Every capacity but the placement-only ``memorySlice<N>`` of MIG devices."""


@attrs.frozen
class DeviceAttribute:
    """An attribute ``--device-attributes`` adds to ``kube_resourceslice_device_info``."""

    label: str
    """``attribute_<name>``, sanitised."""
    domain: str | None
    """The attribute's domain; None for the driver's own (the name given bare)."""
    name: str


@attrs.frozen
class DataKey:
    """A key of a driver's device ``data`` that ``--claim-device-data`` writes as a label."""

    label: str
    """``data_<key>``, sanitised."""
    name: str


@attrs.frozen
class FamilyOptions:
    """How the families are written (``--device-attributes`` and the like)."""

    device_attributes: tuple[DeviceAttribute, ...] = ()
    device_capacities: re.Pattern[str] = re.compile(DEFAULT_DEVICE_CAPACITIES)
    cost_share_capacity: str = "memory"
    """The capacity whose consumed share of a shareable device is the share of its cost."""
    claim_device_data: tuple[DataKey, ...] = ()
    expected_pools: tuple[tuple[str, LabelSelector], ...] = ()
    """``--expect-pools``: (driver, the nodes a pool of it should serve)."""
    hides_allocated_devices: frozenset[str] = frozenset()
    """The drivers that take a device out of their slices while it is allocated (a NIC moved
    into a pod's network namespace): such a device is hidden, not gone."""

    def capacity_wanted(self, name: str) -> bool:
        """Whether ``kube_resourceslice_device_capacity`` reports the capacity *name*."""
        return self.device_capacities.fullmatch(name) is not None


@attrs.define
class Context:
    """The options and classes an object is read with, and what could not be read of it."""

    options: FamilyOptions
    problems: Problems = attrs.Factory(Problems)
    classes: ClassIndex = attrs.Factory(ClassIndex)
    class_errors: list[tuple[str, str]] = attrs.Factory(list)
    """(class, reason) for each device whose match with a class could not be decided."""

    def node_selector(self, raw: msgspec.Raw, resource: str, where: str) -> NodeSelector | None:
        """A node selector, or None: absent, or unreadable (the problem reported)."""
        try:
            return nodeselector.read(raw)
        except gated.Unreadable as error:
            self.problems.add(resource, "nodeSelector", f"{where} nodeSelector: {error}")
            return None

    def created(self, resource: str, meta: wire.ObjectMeta, where: str) -> float | None:
        """The object's creation time in seconds; None, the problem reported, if unreadable."""
        try:
            return gated.timestamp(meta.creation_timestamp)
        except gated.Unreadable as error:
            self.problems.add(
                resource, "metadata.creationTimestamp", f"{where} creationTimestamp: {error}"
            )
            return None
