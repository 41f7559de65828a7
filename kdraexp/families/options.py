"""How the families are written: the options that shape them, each read from its flag.

Every family-shaping flag is read here, by the parser beside the record it fills
(:meth:`FamilyOptions.from_flags`); :mod:`.selection` chooses the families, and the families
read the record through their :class:`~kdraexp.families.context.Context`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from kdraexp.dra.labelselector import LabelSelector, label_selector
from kdraexp.families.allowlist import (
    LABELS,
    Allowlist,
    AllowlistError,
    KeyFilter,
    allowlist_of,
)
from kdraexp.util.labels import KeyedLabels

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DRIVER = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


class SelectionError(ValueError):
    """A flag value that cannot be used; the message names the flag."""


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


def items_of(value: str) -> list[str]:
    """A flag's comma-separated items, spaces around them dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


def device_attributes_of(value: str) -> tuple[DeviceAttribute, ...]:
    """The ``--device-attributes`` value: ``name`` (the driver's domain) or ``domain/name``.

    :raises SelectionError: for a malformed name or two names that give the same label.
    """
    found: dict[str, DeviceAttribute] = {}
    for item in items_of(value):
        domain, _, name = item.rpartition("/")
        if not _IDENTIFIER.fullmatch(name) or (domain and not _DOMAIN.fullmatch(domain)):
            raise SelectionError(
                f"--device-attributes: {item!r} is not an attribute name (name or domain/name)"
            )
        label = "attribute_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
        if label in found:
            raise SelectionError(
                f"--device-attributes: {item!r} and {found[label].name!r} both give {label}"
            )
        found[label] = DeviceAttribute(label, domain or None, name)
    return tuple(found.values())


def claim_device_data_of(value: str) -> tuple[DataKey, ...]:
    """The ``--claim-device-data`` value: top-level keys of a driver's device ``data``.

    :raises SelectionError: for two keys that give the same label.
    """
    found: dict[str, DataKey] = {}
    for item in items_of(value):
        label = "data_" + re.sub(r"[^A-Za-z0-9_]", "_", item)
        if len(item) > 63:
            raise SelectionError(f"--claim-device-data: {item!r} is longer than 63 characters")
        if label in found:
            raise SelectionError(
                f"--claim-device-data: {item!r} and {found[label].name!r} both give {label}"
            )
        found[label] = DataKey(label, item)
    return tuple(found.values())


def expected_pools_of(given: Sequence[str]) -> tuple[tuple[str, LabelSelector], ...]:
    """``--expect-pools DRIVER=LABEL_SELECTOR``, each given: (driver, the nodes it should serve).

    :raises SelectionError: for a driver or selector that cannot be read.
    """
    found = []
    for item in given:
        driver, equals, selector = item.partition("=")
        if not equals or not _DRIVER.fullmatch(driver):
            raise SelectionError(
                f"--expect-pools {item!r}: expected DRIVER=LABEL_SELECTOR, such as "
                "gpu.nvidia.com=nvidia.com/gpu.present=true"
            )
        try:
            found.append((driver, label_selector(selector)))
        except ValueError as error:
            raise SelectionError(f"--expect-pools {item!r}: {error}") from None
    return tuple(found)


def drivers_of(value: str) -> frozenset[str]:
    """The ``--hides-allocated-devices`` value: driver names.

    :raises SelectionError: for a name that is not a driver's (a DNS subdomain, at most 63
        characters, as the API requires).
    """
    drivers = items_of(value)
    for driver in drivers:
        if len(driver) > 63 or not _DRIVER.fullmatch(driver):
            raise SelectionError(
                f"--hides-allocated-devices: {driver!r} is not a driver name (a DNS subdomain "
                "of at most 63 characters)"
            )
    return frozenset(drivers)


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
    labels_allowlist: Allowlist = attrs.Factory(Allowlist)
    annotations_allowlist: Allowlist = attrs.Factory(Allowlist)

    def metadata_keys(self, keyed: KeyedLabels, resource: str) -> KeyFilter | None:
        """The keys of *resource*'s labels or annotations (*keyed*) written, if any."""
        allowlist = self.labels_allowlist if keyed is LABELS else self.annotations_allowlist
        return allowlist.get(resource)

    def capacity_wanted(self, name: str) -> bool:
        """Whether ``kube_resourceslice_device_capacity`` reports the capacity *name*."""
        return self.device_capacities.fullmatch(name) is not None

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any]) -> FamilyOptions:
        """The options the command line gives, by the flags' names (one not given: its default).

        :raises SelectionError: with one line naming the flag at fault.
        """
        capacities = flags.get("device-capacities", DEFAULT_DEVICE_CAPACITIES)
        try:
            pattern = re.compile(capacities)
        except re.error as error:
            raise SelectionError(
                f"--device-capacities: {capacities!r} is not a regular expression: {error}"
            ) from None
        share = flags.get("cost-share-capacity", "memory")
        if not _IDENTIFIER.fullmatch(share.rpartition("/")[2]):
            raise SelectionError(f"--cost-share-capacity: {share!r} is not a name")
        try:
            labels = allowlist_of(
                "--metric-labels-allowlist", flags.get("metric-labels-allowlist", "")
            )
            annotations = allowlist_of(
                "--metric-annotations-allowlist", flags.get("metric-annotations-allowlist", "")
            )
        except AllowlistError as error:
            raise SelectionError(str(error)) from None
        return cls(
            device_attributes=device_attributes_of(flags.get("device-attributes", "")),
            device_capacities=pattern,
            cost_share_capacity=share,
            claim_device_data=claim_device_data_of(flags.get("claim-device-data", "")),
            expected_pools=expected_pools_of(flags.get("expect-pools", ())),
            hides_allocated_devices=drivers_of(flags.get("hides-allocated-devices", "")),
            labels_allowlist=labels,
            annotations_allowlist=annotations,
        )
