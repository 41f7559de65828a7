"""Which of an object's own labels and annotations are written: the allowlists.

``--metric-labels-allowlist`` and ``--metric-annotations-allowlist``, read as kube-state-metrics
reads them (``resource=[key,...]``), and the keys each resource's families write, picked from an
object's map without decoding the rest and cut to a bounded length.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import attrs
import msgspec

from kdraexp.dra.listing import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from kdraexp.util.labels import KeyedLabels, KeyedValues

LABELLED = tuple(
    kind.plural
    for kind in (DEVICE_CLASSES, DEVICE_TAINT_RULES, RESOURCE_SLICES, RESOURCE_CLAIMS, PODS)
)
"""The resources whose labels and annotations the allowlists may name: those whose kind declares
their families (checked against the families at import, in :mod:`kdraexp.families`)."""
_ALLOWLIST_ENTRY = re.compile(r"\s*([^=\[\],]*?)\s*=\[([^=\[\]]*)\]")
"""``resource=[key,...]``: spaces are allowed before the resource and around keys only."""


class AllowlistError(ValueError):
    """An allowlist that cannot be read; the message names the flag."""


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
MAX_MATCHED_KEYS = 128
"""The most keys of one object ``*`` or a key with a ``*`` writes, the first in key order; keys
named outright are written besides.  An object may carry thousands (labels have no bound of
their own): each is a label of one series, which no query reads, and costs memory and time at
every collection."""
_ANY_MAP = msgspec.json.Decoder(dict[str, str | None] | None)
WRITTEN_KEPT = 4096
"""Distinct maps whose labels a :class:`KeyFilter` keeps made, to give them again: claims made
from one template have the same labels, and make them once.  Forgotten all at once past this."""


class Written(msgspec.Struct, frozen=True, gc=False):
    """The labels made of one map, and the keys whose values were cut to write them."""

    values: KeyedValues
    cut: tuple[str, ...]
    left_out: int = 0
    """Keys past :data:`MAX_MATCHED_KEYS` not written."""


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
        :attr:`Written.cut`; keys a ``*`` takes past :data:`MAX_MATCHED_KEYS` are left out,
        counted in :attr:`Written.left_out`.

        :raises msgspec.DecodeError: when *raw* is not a map of strings.
        """
        key = (keyed.prefix, hashlib.blake2b(raw, digest_size=16).digest())
        found = self._written.get(key)
        if found is None:
            picked = self.pick(raw)
            matched = sorted(key for key in picked if key not in self.exact)
            for name in matched[MAX_MATCHED_KEYS:]:
                del picked[name]
            long = tuple(name for name, value in picked.items() if len(value) > MAX_VALUE_LENGTH)
            for name in long:
                picked[name] = cut(picked[name])
            left_out = max(len(matched) - MAX_MATCHED_KEYS, 0)
            found = Written(keyed.values(picked), tuple(sorted(long)), left_out)
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


def allowlist_of(flag: str, value: str) -> Allowlist:
    """A ``--metric-labels-allowlist`` or ``--metric-annotations-allowlist`` value.

    kube-state-metrics' form and meaning: ``resource=[key,...]`` separated by commas
    (``resourceclaims=[team,cost-center],deviceclasses=[*]``), ``*`` as the resource for every
    one (the other entries then do not count), a resource named twice by its last entry; the
    keys as :class:`KeyFilter` reads them.  What kube-state-metrics would cut short without a
    word (a missing bracket, an empty key) is refused.

    :raises AllowlistError: naming *flag*, for a malformed value, an unknown resource, or a key
        with more than one ``*``.
    """
    entries: dict[str, tuple[str, ...]] = {}
    position = 0
    while value.strip():
        entry = _ALLOWLIST_ENTRY.match(value, position)
        if entry is None or not entry[1]:
            raise AllowlistError(
                f"{flag}: expected RESOURCE=[KEY,...] separated by commas, got {value!r}"
            )
        resource, inside = entry[1], entry[2]
        if resource not in LABELLED and resource != WILDCARD:
            raise AllowlistError(
                f"{flag}: unknown resource {resource!r} (expected {', '.join(LABELLED)} or *)"
            )
        keys = tuple(key.strip() for key in inside.split(",")) if inside.strip() else ()
        if not all(keys):
            raise AllowlistError(f"{flag}: {resource}=[{inside}] names an empty key")
        for key in keys:
            if key.count(WILDCARD) > 1:
                raise AllowlistError(f"{flag}: {key!r} holds more than one *")
        entries[resource] = keys
        position = entry.end()
        if position == len(value):
            break
        if value[position] != ",":
            raise AllowlistError(
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
