"""Choosing what is written, with kube-state-metrics' flags and their meaning.

``--resources`` chooses the lists; a family is written when every resource it needs is listed,
when it is not opt-in or ``--metric-opt-in-list`` names it, and when ``--metric-allowlist`` (or
``--metric-denylist``, not both) lets it through.  List items are regular expressions searched in
family names, as kube-state-metrics does (``kube_resourcepool_.*``, or an exact name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

from kdraexp.cel import matching
from kdraexp.dra.labelselector import LabelSelector, label_selector
from kdraexp.dra.listing import (
    BY_PLURAL,
    DEFAULT_RESOURCES,
    DEVICE_CLASSES,
    LIST_ORDER,
    NODES,
    Kind,
)
from kdraexp.families import CLAIM_DEVICE_INFO, DEVICE_INFO, FAMILIES
from kdraexp.families.context import (
    DEFAULT_DEVICE_CAPACITIES,
    WILDCARD,
    Allowlist,
    DataKey,
    DeviceAttribute,
    FamilyOptions,
    KeyFilter,
)
from kdraexp.families.family import Family

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
_DOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABELLED = tuple(
    kind.plural
    for kind in LIST_ORDER
    if any(family.keyed is not None and family.reads is kind for family in FAMILIES)
)
"""The resources whose labels and annotations the allowlists may name: those with such families."""
_ALLOWLIST_ENTRY = re.compile(r"\s*([^=\[\],]*?)\s*=\[([^=\[\]]*)\]")
"""``resource=[key,...]``: spaces are allowed before the resource and around keys only."""


class SelectionError(ValueError):
    """A flag value that cannot be used; the message names the flag."""


@attrs.frozen
class Selection:
    """The resources listed, the families written, and how."""

    resources: frozenset[str]
    families: tuple[Family, ...]
    """The families written, in the order written (the device info family may carry the
    ``--device-attributes`` labels)."""
    options: FamilyOptions
    warnings: tuple[str, ...] = ()

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The kinds listed, in listing order."""
        return tuple(kind for kind in LIST_ORDER if kind.plural in self.resources)

    @property
    def evaluates_selectors(self) -> bool:
        """Whether devices are matched against DeviceClass selectors.

        Only when the classes are listed and a family written reads the matches: otherwise the
        CEL evaluation process is never started (23-27 MiB for nothing).
        """
        return (
            matching.AVAILABLE
            and DEVICE_CLASSES.plural in self.resources
            and any(family.evaluates_selectors for family in self.families)
        )


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _patterns(flag: str, value: str) -> list[re.Pattern[str]]:
    patterns = []
    for item in _items(value):
        try:
            patterns.append(re.compile(item))
        except re.error as error:
            raise SelectionError(f"{flag}: {item!r} is not a regular expression: {error}") from None
    return patterns


def resources_of(value: str) -> frozenset[str]:
    """The ``--resources`` value as resource names.

    :raises SelectionError: for an unknown resource or an empty list.
    """
    resources = _items(value)
    unknown = [name for name in resources if name not in BY_PLURAL]
    if unknown or not resources:
        raise SelectionError(f"--resources: expected some of {', '.join(BY_PLURAL)}, got {value!r}")
    return frozenset(resources)


def device_attributes_of(value: str) -> tuple[DeviceAttribute, ...]:
    """The ``--device-attributes`` value: ``name`` (the driver's domain) or ``domain/name``.

    :raises SelectionError: for a malformed name or two names that give the same label.
    """
    found: dict[str, DeviceAttribute] = {}
    for item in _items(value):
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
    for item in _items(value):
        label = "data_" + re.sub(r"[^A-Za-z0-9_]", "_", item)
        if len(item) > 63:
            raise SelectionError(f"--claim-device-data: {item!r} is longer than 63 characters")
        if label in found:
            raise SelectionError(
                f"--claim-device-data: {item!r} and {found[label].name!r} both give {label}"
            )
        found[label] = DataKey(label, item)
    return tuple(found.values())


_DRIVER = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")


def expected_pools_of(
    given: Sequence[str], chosen: frozenset[str]
) -> tuple[tuple[str, LabelSelector], ...]:
    """``--expect-pools DRIVER=LABEL_SELECTOR``, each given: (driver, the nodes it should serve).

    :raises SelectionError: for a driver or selector that cannot be read, or without the Node
        view (``--resources`` naming ``nodes``), which says what a node is labelled.
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
    if found and NODES.plural not in chosen:
        raise SelectionError("--expect-pools needs --resources to name nodes (the Node view)")
    return tuple(found)


def drivers_of(value: str) -> frozenset[str]:
    """The ``--hides-allocated-devices`` value: driver names.

    :raises SelectionError: for a name that is not a driver's (a DNS subdomain, at most 63
        characters, as the API requires).
    """
    drivers = _items(value)
    for driver in drivers:
        if len(driver) > 63 or not _DRIVER.fullmatch(driver):
            raise SelectionError(
                f"--hides-allocated-devices: {driver!r} is not a driver name (a DNS subdomain "
                "of at most 63 characters)"
            )
    return frozenset(drivers)


def allowlist_of(flag: str, value: str) -> Allowlist:
    """A ``--metric-labels-allowlist`` or ``--metric-annotations-allowlist`` value.

    kube-state-metrics' form and meaning: ``resource=[key,...]`` separated by commas
    (``resourceclaims=[team,cost-center],deviceclasses=[*]``), ``*`` as the resource for every
    one (the other entries then do not count), a resource named twice by its last entry; the
    keys as :class:`KeyFilter` reads them.  What kube-state-metrics would cut short without a
    word (a missing bracket, an empty key) is refused.

    :raises SelectionError: naming *flag*, for a malformed value, an unknown resource, or a key
        with more than one ``*``.
    """
    entries: dict[str, tuple[str, ...]] = {}
    position = 0
    while value.strip():
        entry = _ALLOWLIST_ENTRY.match(value, position)
        if entry is None or not entry[1]:
            raise SelectionError(
                f"{flag}: expected RESOURCE=[KEY,...] separated by commas, got {value!r}"
            )
        resource, inside = entry[1], entry[2]
        if resource not in LABELLED and resource != WILDCARD:
            raise SelectionError(
                f"{flag}: unknown resource {resource!r} (expected {', '.join(LABELLED)} or *)"
            )
        keys = tuple(key.strip() for key in inside.split(",")) if inside.strip() else ()
        if not all(keys):
            raise SelectionError(f"{flag}: {resource}=[{inside}] names an empty key")
        for key in keys:
            if key.count(WILDCARD) > 1:
                raise SelectionError(f"{flag}: {key!r} holds more than one *")
        entries[resource] = keys
        position = entry.end()
        if position == len(value):
            break
        if value[position] != ",":
            raise SelectionError(
                f"{flag}: expected a comma after {value[entry.start() : position].strip()!r}, "
                f"got {value[position:]!r}"
            )
        position += 1
    every = WILDCARD in entries
    if every:
        entries = {resource: entries[WILDCARD] for resource in LABELLED}
    return Allowlist(
        tuple((resource, KeyFilter(keys)) for resource, keys in entries.items() if keys), every
    )


def _allowlisted(family: Family, options: FamilyOptions) -> bool:
    """Whether an allowlist names the kind of *family*, one of an object's own labels."""
    assert family.keyed is not None and isinstance(family.reads, Kind)
    return options.metadata_keys(family.keyed, family.reads.plural) is not None


def select(
    resources: str = ",".join(DEFAULT_RESOURCES),
    allowlist: str = "",
    denylist: str = "",
    opt_in: str = "",
    device_attributes: str = "",
    device_capacities: str = DEFAULT_DEVICE_CAPACITIES,
    cost_share_capacity: str = "memory",
    claim_device_data: str = "",
    hides_allocated_devices: str = "",
    labels_allowlist: str = "",
    annotations_allowlist: str = "",
    sharded: bool = False,
    expect_pools: Sequence[str] = (),
) -> Selection:
    """The selection the flags describe.

    :raises SelectionError: with one line naming the flag at fault.
    """
    chosen = resources_of(resources)
    allow = _patterns("--metric-allowlist", allowlist)
    deny = _patterns("--metric-denylist", denylist)
    if allow and deny:
        raise SelectionError("--metric-allowlist and --metric-denylist are mutually exclusive")
    opted = _patterns("--metric-opt-in-list", opt_in)
    try:
        capacities = re.compile(device_capacities)
    except re.error as error:
        raise SelectionError(
            f"--device-capacities: {device_capacities!r} is not a regular expression: {error}"
        ) from None
    if not _IDENTIFIER.fullmatch(cost_share_capacity.rpartition("/")[2]):
        raise SelectionError(f"--cost-share-capacity: {cost_share_capacity!r} is not a name")
    attributes = device_attributes_of(device_attributes)
    data_keys = claim_device_data_of(claim_device_data)
    expected = expected_pools_of(expect_pools, chosen)
    labels = allowlist_of("--metric-labels-allowlist", labels_allowlist)
    annotations = allowlist_of("--metric-annotations-allowlist", annotations_allowlist)
    options = FamilyOptions(
        attributes,
        capacities,
        cost_share_capacity,
        data_keys,
        expected,
        drivers_of(hides_allocated_devices),
        labels,
        annotations,
    )

    def wanted(family: Family) -> bool:
        if not family.needs <= chosen:
            return False
        if family.keyed is not None and not _allowlisted(family, options):
            return False
        if family.opt_in and not any(p.search(family.name) for p in opted):
            return False
        if allow:
            return any(p.search(family.name) for p in allow)
        return not any(p.search(family.name) for p in deny)

    families = [family for family in FAMILIES if wanted(family)]
    warnings = [
        f"{flag} names {resource}, which --resources does not list: its {what} are not written"
        for flag, allowlist, what in (
            ("--metric-labels-allowlist", labels, "labels"),
            ("--metric-annotations-allowlist", annotations, "annotations"),
        )
        if not allowlist.every_resource
        for resource, _ in allowlist.kinds
        if resource not in chosen
    ]
    if not matching.AVAILABLE:
        warnings += [
            f"{f.name} is not written: no CEL runtime is available for this platform"
            for f in families
            if f.evaluates_selectors
        ]
        families = [f for f in families if not f.evaluates_selectors]
    if attributes and DEVICE_INFO in families:
        index = families.index(DEVICE_INFO)
        families[index] = attrs.evolve(
            DEVICE_INFO, labels=(*DEVICE_INFO.labels, *(a.label for a in attributes))
        )
    if sharded:
        warnings += [
            f"{f.name} is not written: {f.whole_cluster}" for f in families if f.whole_cluster
        ]
        families = [f for f in families if not f.whole_cluster]
    if data_keys and CLAIM_DEVICE_INFO in families:
        index = families.index(CLAIM_DEVICE_INFO)
        families[index] = attrs.evolve(
            CLAIM_DEVICE_INFO, labels=(*CLAIM_DEVICE_INFO.labels, *(k.label for k in data_keys))
        )
    return Selection(chosen, tuple(families), options, tuple(warnings))
