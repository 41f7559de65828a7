"""Every metric family, one module a kind, and the view each kind's families read.

To add a family: declare it with ``@family(...)`` in the module of the kind it reads, saying there
whether it evaluates selectors and why a shard cannot write it, if it cannot (see
:class:`.Family`), and add it to that module's ``FAMILIES``; document it in docs/metrics.md (a
test compares the two).
Beside the kinds: the family declaration and the selection by the command line's flags.

Synchronous. Imports :mod:`kdraexp.allocator` (the facts each kind contributes to the cluster
index, and the answers read from it), :mod:`kdraexp.cel` (selectors matched), :mod:`kdraexp.dra`
and :mod:`kdraexp.util`; never the store, a source or the exposition.
"""

from __future__ import annotations

from kdraexp.dra.listing import LIST_ORDER, Kind
from kdraexp.families import (
    deviceclass,
    devicetaintrule,
    node,
    pod,
    resourceclaim,
    resourcepool,
    resourceslice,
)
from kdraexp.families.allowlist import LABELLED
from kdraexp.families.family import Family
from kdraexp.families.kind import KindSpec

FAMILIES: tuple[Family, ...] = tuple(
    sorted(
        (
            *deviceclass.FAMILIES,
            *devicetaintrule.FAMILIES,
            *node.FAMILIES,
            *pod.FAMILIES,
            *resourceclaim.FAMILIES,
            *resourcepool.FAMILIES,
            *resourceslice.FAMILIES,
        ),
        key=lambda family: family.name,
    )
)
"""Every family, in the order written: sorted by name, as the original writes them."""

BY_NAME = {family.name: family for family in FAMILIES}

KINDS: dict[Kind, KindSpec] = {
    spec.kind: spec
    for spec in (
        deviceclass.KIND,
        devicetaintrule.KIND,
        resourceslice.KIND,
        resourceclaim.KIND,
        pod.KIND,
        node.KIND,
    )
}
"""Per listed kind, its declaration: each object is read once, by its view, for all families."""
if set(KINDS) != set(LIST_ORDER):
    raise AssertionError("a kind listed without a KindSpec, or a KindSpec of a kind not listed")
if (
    tuple(
        kind.plural
        for kind in LIST_ORDER
        if any(family.keyed is not None and family.reads is kind for family in FAMILIES)
    )
    != LABELLED
):
    raise AssertionError("allowlist.LABELLED is not the kinds that declare label families")

DEVICE_INFO = resourceslice.device_info
CLAIM_DEVICE_INFO = resourceclaim.status_device_info
