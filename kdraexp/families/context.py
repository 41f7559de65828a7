"""What the families read besides the object: the options, the classes, where problems go."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import attrs
import msgspec

from kdraexp.cel.classindex import ClassIndex
from kdraexp.dra import gated, nodeselector, wire
from kdraexp.dra.labelselector import LabelSelector
from kdraexp.dra.nodeselector import NodeSelector
from kdraexp.dra.problems import Problems
from kdraexp.util.labels import KeyedLabels, KeyedValues

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


WILDCARD = "*"
"""First in a kind's keys, every key; within a key, any text (``app.kubernetes.io/*``)."""
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""What ``kubectl apply`` leaves of the whole object, environment variables and all: written
only when named outright, never for ``*`` or a key with a ``*``."""
MAX_VALUE_LENGTH = 256
"""The most characters of a value written.  A label's value is at most 63, an annotation's may
be 256 KiB: every scraper would read it, and every collection hold it, in full."""
CUT_MARK = "..."
"""What ends a value cut to :data:`MAX_VALUE_LENGTH`: its first characters, then this."""
_ANY_MAP = msgspec.json.Decoder(dict[str, str | None] | None)
WRITTEN_KEPT = 4096
"""Distinct maps whose labels a :class:`KeyFilter` keeps made, to give them again: claims made
from one template have the same labels, and make them once.  Forgotten all at once past this."""


class Written(msgspec.Struct, frozen=True, gc=False):
    """The labels made of one map, and the keys whose values were cut to write them."""

    values: KeyedValues
    cut: tuple[str, ...]


def cut(value: str) -> str:
    """*value*, or its first characters and :data:`CUT_MARK` when longer than the bound."""
    if len(value) <= MAX_VALUE_LENGTH:
        return value
    return value[: MAX_VALUE_LENGTH - len(CUT_MARK)] + CUT_MARK


@attrs.frozen
class KeyFilter:
    """The keys of one kind's labels (or annotations) written, as kube-state-metrics picks them.

    ``*`` first takes every key (anywhere else it is passed over); a key holding one ``*``
    takes every key it matches, the ``*`` standing for any text; any other key, itself.  Neither
    ``*`` nor a pattern takes :data:`LAST_APPLIED`.  A map is decoded only here, when a family
    asks: for keys named outright, those keys alone.
    """

    keys: tuple[str, ...]
    every: bool = attrs.field(init=False)
    exact: tuple[str, ...] = attrs.field(init=False)
    patterns: tuple[re.Pattern[str], ...] = attrs.field(init=False)
    _decoder: msgspec.json.Decoder[Any] = attrs.field(init=False, eq=False, repr=False)
    _written: dict[tuple[str, bytes], Written] = attrs.field(
        init=False, eq=False, repr=False, factory=dict
    )
    """The labels made of each map lately read, by its prefix and a digest of its JSON: the
    JSON itself may be 256 KiB."""

    def __attrs_post_init__(self) -> None:
        keys = self.keys
        every = bool(keys) and keys[0] == WILDCARD
        exact = tuple(dict.fromkeys(key for key in keys if WILDCARD not in key))
        patterns = tuple(
            re.compile(".*".join(re.escape(part) for part in key.split(WILDCARD)))
            for key in dict.fromkeys(keys)
            if WILDCARD in key and key != WILDCARD
        )
        if every or patterns:
            decoder: msgspec.json.Decoder[Any] = _ANY_MAP
        else:  # the keys named are decoded, every other one skipped
            chosen = msgspec.defstruct(
                "ChosenKeys",
                [
                    (f"k{i}", str | None | msgspec.UnsetType, msgspec.UNSET)
                    for i in range(len(exact))
                ],
                rename={f"k{i}": key for i, key in enumerate(exact)},
                gc=False,
            )
            decoder = msgspec.json.Decoder(chosen | None)
        object.__setattr__(self, "every", every)
        object.__setattr__(self, "exact", exact)
        object.__setattr__(self, "patterns", patterns)
        object.__setattr__(self, "_decoder", decoder)

    def written(self, keyed: KeyedLabels, raw: msgspec.Raw) -> Written:
        """The labels *keyed* makes of the keys wanted of *raw*, made once for equal maps.

        A value longer than :data:`MAX_VALUE_LENGTH` is :func:`cut`, its key named in
        :attr:`Written.cut`.

        :raises msgspec.DecodeError: when *raw* is not a map of strings.
        """
        key = (keyed.prefix, hashlib.blake2b(raw, digest_size=16).digest())
        found = self._written.get(key)
        if found is None:
            picked = self.pick(raw)
            long = tuple(name for name, value in picked.items() if len(value) > MAX_VALUE_LENGTH)
            for name in long:
                picked[name] = cut(picked[name])
            found = Written(keyed.values(picked), tuple(sorted(long)))
            if len(self._written) >= WRITTEN_KEPT:
                self._written.clear()
            self._written[key] = found
        return found

    def pick(self, raw: msgspec.Raw) -> dict[str, str]:
        """The keys wanted, and their values, of an undecoded ``labels`` or ``annotations`` map.

        A null value is the empty string, as Go reads it.

        :raises msgspec.DecodeError: when *raw* is not a map of strings.
        """
        if not raw:
            return {}
        found = self._decoder.decode(raw)
        if found is None:
            return {}
        if self._decoder is not _ANY_MAP:
            return {
                key: value or ""
                for key, value in zip(self.exact, msgspec.structs.astuple(found), strict=True)
                if value is not msgspec.UNSET
            }
        if self.every:
            return {
                key: value or ""
                for key, value in found.items()
                if key != LAST_APPLIED or key in self.exact
            }
        picked = {key: found[key] or "" for key in self.exact if key in found}
        for key, value in found.items():
            if key != LAST_APPLIED and any(pattern.fullmatch(key) for pattern in self.patterns):
                picked[key] = value or ""
        return picked


@attrs.frozen
class Allowlist:
    """``--metric-labels-allowlist`` or ``--metric-annotations-allowlist``: per kind, its keys.

    A kind not named (or named with no key) has none of its labels written, and no family of
    them.
    """

    kinds: tuple[tuple[str, KeyFilter], ...] = ()
    """(resource, its keys), for each resource with at least one key."""
    every_resource: bool = False
    """Given for ``*``, every resource: those not listed are no mistake."""
    _by_resource: dict[str, KeyFilter] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_by_resource", dict(self.kinds))

    def get(self, resource: str) -> KeyFilter | None:
        """The keys of *resource* written, if any."""
        return self._by_resource.get(resource)


LABELS = KeyedLabels("label")
"""An object's labels, as ``label_<key>``."""
ANNOTATIONS = KeyedLabels("annotation")
"""An object's annotations, as ``annotation_<key>``."""


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
    labels_allowlist: Allowlist = Allowlist()
    annotations_allowlist: Allowlist = Allowlist()

    def metadata_keys(self, keyed: KeyedLabels, resource: str) -> KeyFilter | None:
        """The keys of *resource*'s labels or annotations (*keyed*) written, if any."""
        allowlist = self.labels_allowlist if keyed is LABELS else self.annotations_allowlist
        return allowlist.get(resource)

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
