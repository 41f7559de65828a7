"""One declaration per family: its type and labels are checked, and a wrong row fails loudly."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kdraexp.allocator.scopes import Per
from kdraexp.dra.listing import RESOURCE_CLAIMS, RESOURCE_SLICES
from kdraexp.families import FAMILIES
from kdraexp.families.family import (
    CLUSTER,
    Family,
    Row,
    Stability,
    family,
)
from kdraexp.util.labels import KeyedLabels, LabelArityError, LabelGroup

GROUP = LabelGroup(("namespace", "resourceclaim_name"))
KEYED = KeyedLabels("label")


@family("kube_test_grouped", "A family with a group.", (GROUP, "state"), RESOURCE_CLAIMS, "x")
def grouped(view: object) -> Iterator[Row]:
    yield (GROUP.values("ns", "c"), "pending", 1.0)


@family(
    "kube_test_original",
    "Written as the original.",
    ("z", "a"),
    CLUSTER,
    "x",
    original=True,
    per=Per.POOL,
)
def original(index: object) -> Iterator[Row]:
    yield ("last", "first", 2.0)


def test_declaration_carries_type_labels_and_needs() -> None:
    """A family knows its type, labels (groups expanded), stability and the lists it needs."""
    assert grouped.type == "gauge"
    assert grouped.label_names == ("namespace", "resourceclaim_name", "state")
    assert grouped.stability is Stability.ALPHA
    assert grouped.needs == {"resourceclaims"}
    assert original.needs == frozenset()
    declared = family(
        "kube_test_needs",
        "h",
        ("a",),
        CLUSTER,
        "x",
        needs=(RESOURCE_SLICES, RESOURCE_CLAIMS),
        per=Per.POOL,
    )(lambda _: ())
    assert declared.needs == {"resourceslices", "resourceclaims"}


def test_rows_render_in_declared_order_with_groups() -> None:
    """New families write labels in declaration order; groups are rendered once."""
    (row,) = grouped.rows(None)
    assert grouped.line_prefix(row) == (
        'kube_test_grouped{namespace="ns",resourceclaim_name="c",state="pending"} '
    )
    assert grouped.labels_of(row) == {
        "namespace": "ns",
        "resourceclaim_name": "c",
        "state": "pending",
    }


def test_original_families_write_labels_alphabetically() -> None:
    """The original's families write label names sorted, as client_golang does."""
    (row,) = original.rows(None)
    assert original.line_prefix(row) == 'kube_test_original{a="first",z="last"} '


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ((GROUP.values("ns", "c"), 1.0), "1 label values for 2 labels"),
        ((GROUP.values("ns", "c"), "a", "b", 1.0), "3 label values for 2 labels"),
        (("ns", "pending", 1.0), "label 0 needs its group"),
        ((LabelGroup(("namespace", "x")).values("ns", "c"), "p", 1.0), "label 0 needs its group"),
        ((GROUP.values("ns", "c"), 7, 1.0), "label 1 is not a string"),
    ],
    ids=["too-few", "too-many", "group-missing", "other-group", "not-a-string"],
)
def test_wrong_rows_fail_loudly(row: Row, message: str) -> None:
    """A row that does not fit the declaration raises, naming the family."""
    with pytest.raises(LabelArityError, match=f"kube_test_grouped: {message}"):
        grouped.line_prefix(row)


def test_group_values_checked() -> None:
    """A group given the wrong number of values raises."""
    with pytest.raises(LabelArityError, match="1 values for the 2 labels"):
        GROUP.values("only")


def test_label_values_are_escaped() -> None:
    """Quotes, backslashes and newlines in values are escaped, in groups and alone."""
    row = (GROUP.values('a"b', "c\\d"), "e\nf", 1.0)
    assert grouped.line_prefix(row) == (
        'kube_test_grouped{namespace="a\\"b",resourceclaim_name="c\\\\d",state="e\\nf"} '
    )


@family("kube_test_keyed", "Own labels.", (GROUP, KEYED), RESOURCE_CLAIMS, "x")
def keyed(view: object) -> Iterator[Row]:
    yield (GROUP.values("ns", "c"), KEYED.values({"cost-center": 'a"b', "team": "ml"}), 1.0)
    yield (GROUP.values("ns", "d"), KEYED.values({}), 1.0)


def test_keyed_labels_come_with_each_row() -> None:
    """An object's own labels follow the others, named by the row; none leaves no comma."""
    labelled, bare = keyed.rows(None)
    assert keyed.line_prefix(labelled) == (
        'kube_test_keyed{namespace="ns",resourceclaim_name="c",label_cost_center="a\\"b",'
        'label_team="ml"} '
    )
    assert keyed.line_prefix(bare) == 'kube_test_keyed{namespace="ns",resourceclaim_name="d"} '
    assert keyed.labels_of(labelled) == {
        "namespace": "ns",
        "resourceclaim_name": "c",
        "label_cost_center": 'a"b',
        "label_team": "ml",
    }
    assert keyed.label_names == ("namespace", "resourceclaim_name", "label_<key>")
    with pytest.raises(LabelArityError, match="kube_test_keyed: label 1 is not keyed"):
        keyed.line_prefix((GROUP.values("ns", "c"), "ml", 1.0))


def test_declarations_refuse_mistakes() -> None:
    """A label declared twice, or a group on an original family, is refused at import."""
    with pytest.raises(ValueError, match="declared twice"):
        Family("kube_x", "h", (GROUP, "namespace"), lambda _: (), CLUSTER, frozenset(), "")
    with pytest.raises(ValueError, match="no label groups"):
        Family("kube_x", "h", (GROUP,), lambda _: (), CLUSTER, frozenset(), "", original=True)
    with pytest.raises(ValueError, match="says what its sets are per"):
        Family("kube_x", "h", ("a",), lambda _: (), CLUSTER, frozenset(), "")
    for labels in ((KEYED, "a"), (KEYED,), ("a", KEYED, KeyedLabels("annotation"))):
        with pytest.raises(ValueError, match="keyed labels come last, after another label"):
            Family("kube_x", "h", labels, lambda _: (), RESOURCE_CLAIMS, frozenset(), "")


def test_every_family_is_a_gauge_with_help() -> None:
    """The contract: every family a gauge, with help text, seven of them STABLE."""
    assert {f.type for f in FAMILIES} == {"gauge"}
    assert all(f.help.endswith(".") for f in FAMILIES)
    stable = [f.name for f in FAMILIES if f.stability is Stability.STABLE]
    assert len(stable) == 7
    assert all(f.original for f in FAMILIES if f.stability is Stability.STABLE)
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)
