"""kube-state-metrics' ``kube_<kind>_labels`` and ``kube_<kind>_annotations``, for any kind.

Who pays for a device is in the labels of the claim that holds it (a claim made from a template
carries the labels of the template's ``spec.metadata``): written as kube-state-metrics writes
them, they join the cost families with one ``group_left``.  Each kind's module declares the pair
with the labels that name its objects; ``--metric-labels-allowlist`` and
``--metric-annotations-allowlist`` choose the keys, and a kind they do not name has neither
family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from kdraexp.dra import wire
from kdraexp.dra.listing import Kind
from kdraexp.families.allowlist import (
    ANNOTATIONS,
    CUT_MARK,
    LABELS,
    MAX_MATCHED_KEYS,
    MAX_VALUE_LENGTH,
)
from kdraexp.families.family import Family, LabelSpec, Row, family
from kdraexp.util.labels import KeyedLabels

Named = tuple[tuple[Any, ...], wire.ObjectMeta]
"""The values of the labels that name an object, and its metadata."""


def metadata_families(
    kind: Kind, identity: LabelSpec, named: Callable[[Any], Named | None]
) -> tuple[Family, Family]:
    """``kube_<kind>_labels`` and ``kube_<kind>_annotations`` of *kind*'s views.

    *identity* are the labels that name an object, as the kind's ``_info`` family names it;
    *named* gives their values and the object's metadata, or None for an object whose families
    write nothing (a pod that uses no device).
    """
    short = kind.kind.lower()

    def declare(keyed: KeyedLabels, field: str, flag: str) -> Family:
        def rows(view: Any) -> Iterator[Row]:
            found = named(view)
            keys = view.context.options.metadata_keys(keyed, kind.plural)
            if found is None or keys is None:
                return
            values, meta = found
            try:
                written = keys.written(keyed, getattr(meta, field))
            except msgspec.DecodeError as error:
                where = f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name
                view.context.problems.add(
                    kind.plural, f"metadata.{field}", f"{kind.kind} {where} {field}: {error}"
                )
                return
            for key in written.cut:
                view.context.problems.add_cut_short(
                    kind.plural,
                    f"metadata.{field}",
                    f"{kind.kind} {field} {key}: values longer than {MAX_VALUE_LENGTH} characters"
                    f" are written cut short, ending in {CUT_MARK}",
                )
            if written.left_out:
                view.context.problems.add_cut_short(
                    kind.plural,
                    f"metadata.{field}",
                    f"{kind.kind} {field}: an object's keys past the first {MAX_MATCHED_KEYS}"
                    " a * takes are left out",
                    written.left_out,
                )
            yield (*values, written.values, 1.0)

        return family(
            f"kube_{short}_{field}",
            f"Kubernetes {field} converted to Prometheus labels.",
            (*identity, keyed),
            kind,
            f"metadata.{field} (the keys {flag} names)",
        )(rows)

    return (
        declare(LABELS, "labels", "--metric-labels-allowlist"),
        declare(ANNOTATIONS, "annotations", "--metric-annotations-allowlist"),
    )
