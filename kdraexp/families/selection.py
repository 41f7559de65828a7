"""Choosing what is written, with kube-state-metrics' flags and their meaning.

``--resources`` chooses the lists; a family is written when every resource it needs is listed,
when it is not opt-in or ``--metric-opt-in-list`` names it, and when ``--metric-allowlist`` (or
``--metric-denylist``, not both) lets it through.  List items are regular expressions searched in
family names, as kube-state-metrics does (``kube_resourcepool_.*``, or an exact name).  How the
chosen families are written is :class:`~kdraexp.families.options.FamilyOptions`'.
"""

from __future__ import annotations

import re

import attrs

from kdraexp.cel import matching
from kdraexp.dra.listing import (
    BY_PLURAL,
    DEFAULT_RESOURCES,
    DEVICE_CLASSES,
    LIST_ORDER,
    NODES,
    Kind,
)
from kdraexp.families import CLAIM_DEVICE_INFO, DEVICE_INFO, FAMILIES
from kdraexp.families.family import Family
from kdraexp.families.options import FamilyOptions, SelectionError, items_of

__all__ = ["Selection", "SelectionError", "resources_of", "select"]


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


def _patterns(flag: str, value: str) -> list[re.Pattern[str]]:
    patterns = []
    for item in items_of(value):
        try:
            patterns.append(re.compile(item))
        except re.error as error:
            raise SelectionError(f"{flag}: {item!r} is not a regular expression: {error}") from None
    return patterns


def resources_of(value: str) -> frozenset[str]:
    """The ``--resources`` value as resource names.

    :raises SelectionError: for an unknown resource or an empty list.
    """
    resources = items_of(value)
    unknown = [name for name in resources if name not in BY_PLURAL]
    if unknown or not resources:
        raise SelectionError(f"--resources: expected some of {', '.join(BY_PLURAL)}, got {value!r}")
    return frozenset(resources)


def _allowlisted(family: Family, options: FamilyOptions) -> bool:
    """Whether an allowlist names the kind of *family*, one of an object's own labels."""
    assert family.keyed is not None and isinstance(family.reads, Kind)
    return options.metadata_keys(family.keyed, family.reads.plural) is not None


def select(
    resources: str = ",".join(DEFAULT_RESOURCES),
    allowlist: str = "",
    denylist: str = "",
    opt_in: str = "",
    options: FamilyOptions = FamilyOptions(),  # noqa: B008 - frozen
    sharded: bool = False,
) -> Selection:
    """The families the flags choose, written as *options* say.

    :raises SelectionError: with one line naming the flag at fault.
    """
    chosen = resources_of(resources)
    allow = _patterns("--metric-allowlist", allowlist)
    deny = _patterns("--metric-denylist", denylist)
    if allow and deny:
        raise SelectionError("--metric-allowlist and --metric-denylist are mutually exclusive")
    opted = _patterns("--metric-opt-in-list", opt_in)
    if options.expected_pools and NODES.plural not in chosen:
        raise SelectionError("--expect-pools needs --resources to name nodes (the Node view)")

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
    warnings = _unlisted(options, chosen)
    if not matching.AVAILABLE:
        warnings += [
            f"{f.name} is not written: no CEL runtime is available for this platform"
            for f in families
            if f.evaluates_selectors
        ]
        families = [f for f in families if not f.evaluates_selectors]
    if sharded:
        warnings += [
            f"{f.name} is not written: {f.whole_cluster}" for f in families if f.whole_cluster
        ]
        families = [f for f in families if not f.whole_cluster]
    return Selection(chosen, _with_option_labels(families, options), options, tuple(warnings))


def _unlisted(options: FamilyOptions, chosen: frozenset[str]) -> list[str]:
    """Warnings for the resources an allowlist names that ``--resources`` does not list."""
    return [
        f"{flag} names {resource}, which --resources does not list: its {what} are not written"
        for flag, allowlist, what in (
            ("--metric-labels-allowlist", options.labels_allowlist, "labels"),
            ("--metric-annotations-allowlist", options.annotations_allowlist, "annotations"),
        )
        if not allowlist.every_resource
        for resource, _ in allowlist.kinds
        if resource not in chosen
    ]


def _with_option_labels(families: list[Family], options: FamilyOptions) -> tuple[Family, ...]:
    """*families*, the device info families with the labels the options add to them."""
    added = {
        DEVICE_INFO: tuple(a.label for a in options.device_attributes),
        CLAIM_DEVICE_INFO: tuple(k.label for k in options.claim_device_data),
    }
    return tuple(
        attrs.evolve(f, labels=(*f.labels, *added[f])) if added.get(f) else f for f in families
    )
