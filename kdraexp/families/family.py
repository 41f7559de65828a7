"""A metric family, declared once: name, help, type, labels, stability, where its rows come from.

kube-state-metrics' family generators are the model: each family is one declaration holding its
name, help text, type and the function that produces its rows from an object, so adding a family
is one block in the file of its kind (``kdraexp/families/``).

A row is a tuple of label values followed by the sample's value.  Families whose rows share a
leading group of labels (the device labels D, the claim labels C) take that group as one
:class:`GroupValues`, rendered once and reused by every family of the object.  A family of an
object's own labels or annotations ends with :class:`KeyedLabels`, whose names come with each
row (a :class:`KeyedValues`), as kube-state-metrics writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any, TypedDict, Unpack

import attrs

from kdraexp.allocator.scopes import Per
from kdraexp.dra.listing import Kind
from kdraexp.util.labels import (
    GroupValues,
    KeyedLabels,
    KeyedValues,
    LabelArityError,
    LabelGroup,
    escape_label_value,
)


class Stability(StrEnum):
    """How settled a family is (kube-state-metrics' levels)."""

    STABLE = "STABLE"
    """The original's seven families: their names, labels and meaning do not change."""
    ALPHA = "ALPHA"
    """New families: may still change."""


Row = tuple[Any, ...]
"""Label values (strings, GroupValues for a group, KeyedValues last) then the value (a float)."""
LabelSpec = tuple["str | LabelGroup | KeyedLabels", ...]


class Cluster:
    """Marks families computed over every listed object at once (pools, device states, cost)."""


CLUSTER = Cluster()


@attrs.frozen(eq=False)
class Family:
    """One metric family and the function that makes its rows."""

    name: str
    help: str
    labels: LabelSpec
    """Label names in the order written, with groups where rows give a GroupValues."""
    rows: Callable[[Any], Iterable[Row]] = attrs.field(repr=False)
    """Rows from one object (a view of it), or from the cluster index for CLUSTER families."""
    reads: Kind | Cluster
    needs: frozenset[str]
    """The resources whose lists the rows depend on; the family is written only with all of them."""
    fields: str
    """The API fields read, for the metrics reference."""
    type: str = "gauge"
    stability: Stability = Stability.ALPHA
    opt_in: bool = False
    """Written only when ``--metric-opt-in-list`` names it."""
    original: bool = False
    """One of the original's seven: labels written alphabetically and samples sorted, as it does."""
    current_generation: bool = False
    """Rows of a slice count only when it belongs to its pool's current generation."""
    evaluates_selectors: bool = False
    """Its rows match devices against DeviceClass selectors: not written without a CEL runtime."""
    whole_cluster: str = ""
    """Why a shard cannot write it, when its rows join an object with every pool or claim."""
    per: Per = Per.NONE
    """For a cross-object family, what its rows come in sets of."""
    keyed: KeyedLabels | None = attrs.field(init=False)
    """The labels its objects name themselves, last of its labels; written only for the kinds
    an allowlist names (see :mod:`kdraexp.families.selection`)."""
    label_names: tuple[str, ...] = attrs.field(init=False)
    """Every label name; for :attr:`keyed`, how they are shown (``label_<key>``)."""
    line_prefix: Callable[[Row], str] = attrs.field(init=False, repr=False)
    """``name{labels} `` for a row, to which the writer appends the value.

    Raises :class:`LabelArityError` when the row does not fit the declared labels."""

    def __attrs_post_init__(self) -> None:
        names: list[str] = []
        for label in self.labels:
            if isinstance(label, LabelGroup):
                names.extend(label.names)
            else:
                names.append(label.shown if isinstance(label, KeyedLabels) else label)
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: a label is declared twice")
        if self.original and any(not isinstance(label, str) for label in self.labels):
            raise ValueError(f"{self.name}: the original's families take no label groups")
        keyed = [label for label in self.labels if isinstance(label, KeyedLabels)]
        if keyed and (len(keyed) > 1 or self.labels[-1] is not keyed[0] or len(self.labels) < 2):
            raise ValueError(f"{self.name}: keyed labels come last, after another label")
        object.__setattr__(self, "keyed", keyed[0] if keyed else None)
        if (self.reads is CLUSTER) != (self.per is not Per.NONE):
            raise ValueError(f"{self.name}: a cross-object family says what its sets are per")
        object.__setattr__(self, "label_names", tuple(names))
        object.__setattr__(self, "line_prefix", _renderer(self))

    def labels_of(self, row: Row) -> dict[str, str]:
        """The row's labels by name, groups and keyed labels expanded."""
        found: dict[str, str] = {}
        for label, value in zip(self.labels, row[:-1], strict=True):
            if isinstance(label, str):
                found[label] = value
            else:
                names = label.names if isinstance(label, LabelGroup) else value.names
                found.update(zip(names, value.values, strict=True))
        return found


def _renderer(family: Family) -> Callable[[Row], str]:
    """A function rendering ``name{labels} `` for one of *family*'s rows, checking the row first.

    Generated per family (as attrs and dataclasses generate ``__init__``): writing hundreds of
    thousands of lines a scrape, a straight-line function is twice as fast as a generic loop.
    The original's families write their labels alphabetically, as the original does.
    """
    order = list(range(len(family.labels)))
    if family.original:
        order.sort(key=lambda index: family.labels[index])  # type: ignore[arg-type,return-value]
    checks, parts = [], []
    for position, index in enumerate(order):
        label = family.labels[index]
        value = f"v{index}"
        checks.append(f"    {value} = row[{index}]")
        if isinstance(label, KeyedLabels):  # last, never first: its text brings its commas
            checks.append(f"    if {value}.__class__ is not KeyedValues:")
            checks.append(f"        raise LabelArityError(f'{{name}}: label {index} is not keyed')")
            parts.append(f"{{{value}.text}}")
            continue
        if isinstance(label, LabelGroup):
            checks.append(
                f"    if {value}.__class__ is not GroupValues or {value}.group is not group{index}:"
            )
            checks.append(
                f"        raise LabelArityError(f'{{name}}: label {index} needs its group')"
            )
            parts.append(f"{',' if position else ''}{{{value}.text}}")
            continue
        checks.append(f"    if {value}.__class__ is not str:")
        checks.append(f"        raise LabelArityError(f'{{name}}: label {index} is not a string')")
        checks.append(f"    if '\"' in {value} or '\\\\' in {value} or '\\n' in {value}:")
        checks.append(f"        {value} = escape({value})")
        parts.append(f'{"," if position else ""}{label}="{{{value}}}"')
    source = "\n".join(
        [
            "def line_prefix(row):",
            f"    if len(row) != {len(family.labels) + 1}:",
            f"        raise LabelArityError(f'{{name}}: {{len(row) - 1}} label values for "
            f"{len(family.labels)} labels')",
            *checks,
            f"    return f'{{name}}{{{{{''.join(parts).replace(chr(39), chr(92) + chr(39))}}}}} '",
        ]
    )
    namespace: dict[str, Any] = {
        "name": family.name,
        "GroupValues": GroupValues,
        "KeyedValues": KeyedValues,
        "LabelArityError": LabelArityError,
        "escape": escape_label_value,
        **{f"group{i}": label for i, label in enumerate(family.labels)},
    }
    exec(source, namespace)  # the source is built above from the declaration alone
    renderer: Callable[[Row], str] = namespace["line_prefix"]
    return renderer


class Declared(TypedDict, total=False):
    """What a family's declaration may say of it: the :class:`Family` fields of these names."""

    stability: Stability
    opt_in: bool
    original: bool
    current_generation: bool
    evaluates_selectors: bool
    whole_cluster: str
    per: Per


class FamilyKeywords(Declared, total=False):
    """What several declarations share, kept in one dict: :class:`Declared`, and *needs*.

    The pending claims' families share theirs, and so do the pods joined with their claims.
    """

    needs: Iterable[Kind]


def family(
    name: str,
    help: str,
    labels: LabelSpec,
    reads: Kind | Cluster,
    fields: str,
    *,
    needs: Iterable[Kind] = (),
    **declared: Unpack[Declared],
) -> Callable[[Callable[[Any], Iterable[Row]]], Family]:
    """Declare a family over the function it decorates, which makes its rows.

    *needs* names the kinds the rows depend on besides the one they read.
    """

    def declare(rows: Callable[[Any], Iterable[Row]]) -> Family:
        kinds = {kind.plural for kind in needs}
        if isinstance(reads, Kind):
            kinds.add(reads.plural)
        return Family(name, help, labels, rows, reads, frozenset(kinds), fields, **declared)

    return declare
