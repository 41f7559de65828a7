"""Label selectors read as ``labels.Parse`` reads them.

The cases are those of k8s.io/apimachinery v0.37.2's ``pkg/labels/selector_test.go``, under the
names of its tests there: ``TestSelectorParse``, ``TestSetSelectorParser``,
``TestSelectorMatches`` and ``TestRequirementSelectorMatching``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdraexp.dra.labelselector import label_selector
from kdraexp.dra.nodeselector import Requirement, int64


@pytest.mark.parametrize(
    "text",
    ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5"],
)
def test_selector_parse_good(text: str) -> None:
    """``TestSelectorParse``'s good strings."""
    label_selector(text)


@pytest.mark.parametrize("text", ["x=a||y=b", "x==a==b", "!x=a", "x<a"])
def test_selector_parse_bad(text: str) -> None:
    """``TestSelectorParse``'s bad strings."""
    with pytest.raises(ValueError):
        label_selector(text)


def r(key: str, operator: str, *values: str) -> Requirement:
    return Requirement(key, operator, values)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("\rx", (r("x", "Exists"),)),
        (
            "this-is-a-dns.domain.com/key-with-dash",
            (r("this-is-a-dns.domain.com/key-with-dash", "Exists"),),
        ),
        (
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            (r("this-is-another-dns.domain.com/key-with-dash", "In", "so", "what"),),
        ),
        (
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            (r("0.1.2.domain/99", "NotIn", "10.10.100.1", "tick.tack.clock"),),
        ),
        ("foo  in\t (abc)", (r("foo", "In", "abc"),)),
        ("x notin\n (abc)", (r("x", "NotIn", "abc"),)),
        ("x  notin\t\t\t(abc,def)", (r("x", "NotIn", "abc", "def"),)),
        ("x in (abc,def)", (r("x", "In", "abc", "def"),)),
        ("x in (abc,)", (r("x", "In", "", "abc"),)),
        ("x in (abc,abc)", (r("x", "In", "abc"),)),
        ("x in ()", (r("x", "In", ""),)),
        ("x in (a,,)", (r("x", "In", "", "a"),)),
        ("x in (a,,,)", (r("x", "In", "", "a"),)),
        ("x in (a,,,,,,)", (r("x", "In", "", "a"),)),
        ("x in (a,,a,,a,,a,,)", (r("x", "In", "", "a"),)),
        (
            "x notin (abc,,def),bar,z in (),w",
            (
                r("bar", "Exists"),
                r("w", "Exists"),
                r("x", "NotIn", "", "abc", "def"),
                r("z", "In", ""),
            ),
        ),
        ("x,y in (a)", (r("x", "Exists"), r("y", "In", "a"))),
        ("x=a", (r("x", "In", "a"),)),
        ("x>1", (r("x", "Gt", "1"),)),
        ("x<7", (r("x", "Lt", "7"),)),
        ("x=a,y!=b", (r("x", "In", "a"), r("y", "NotIn", "b"))),
        (
            "x=a,y!=b,z in (h,i,j)",
            (r("x", "In", "a"), r("y", "NotIn", "b"), r("z", "In", "h", "i", "j")),
        ),
        ("x notin ( )", (r("x", "NotIn", ""),)),
        ("x notin (, a)", (r("x", "NotIn", "", "a"),)),
        ("a ", (r("a", "Exists"),)),
        ("a in (x,y,notin, z,in)", (r("a", "In", "in", "notin", "x", "y", "z"),)),
    ],
)
def test_set_selector_parser_valid(text: str, expected: tuple[Requirement, ...]) -> None:
    """``TestSetSelectorParser``'s valid cases: the requirements it reads, sorted by key.

    ``=`` is ``in`` one value and ``!=`` ``notin`` one, as a node selector says them.
    """
    assert label_selector(text).requirements == expected


@pytest.mark.parametrize(
    "text",
    [
        "x=a||y=b",
        "x,,y",
        ",x,y",
        "x nott in (y)",
        "a in (xyz),",
        "a in (xyz)b notin ()",
        "a in (xyz abc)",
        "a notin(",
        "a (",
        "(",
        # and what the old reading took: a key named "x>5", everything, nothing
        ",,,",
        "x>a",
        "x>1_0",
        "x>99999999999999999999",
        "a=b=c",
        "a/b/c",
        "-a",
        "a=" + "v" * 64,
        "UPPER.example.com/a",
    ],
)
def test_set_selector_parser_invalid(text: str) -> None:
    """``TestSetSelectorParser``'s invalid cases, and more ``NewRequirement`` refuses."""
    with pytest.raises(ValueError) as caught:
        label_selector(text)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "labels", "matched"),
    [
        ("", {"x": "y"}, True),
        ("x=y", {"x": "y"}, True),
        ("x=y,z=w", {"x": "y", "z": "w"}, True),
        ("x!=y,z!=w", {"x": "z", "z": "a"}, True),
        ("notin=in", {"notin": "in"}, True),
        ("x", {"x": "z"}, True),
        ("!x", {"y": "z"}, True),
        ("x>1", {"x": "2"}, True),
        ("x<1", {"x": "0"}, True),
        ("x=z", {}, False),
        ("x=y", {"x": "z"}, False),
        ("x=y,z=w", {"x": "w", "z": "w"}, False),
        ("x!=y,z!=w", {"x": "z", "z": "w"}, False),
        ("x", {"y": "z"}, False),
        ("!x", {"x": "z"}, False),
        ("x>1", {"x": "0"}, False),
        ("x<1", {"x": "2"}, False),
        ("foo=bar,baz=blah", {"foo": "bar", "baz": "blah"}, True),
        ("foo=blah", {"foo": "bar", "baz": "blah"}, False),
        ("foo=bar,foobar=bar,baz=blah", {"foo": "bar", "baz": "blah"}, False),
        # TestRequirementSelectorMatching
        ("x notin (),y", {"y": ""}, True),
        ("!x,y", {"y": ""}, True),
        ("x notin (),!y", {"y": ""}, False),
        ("x in ()", {"y": "baz"}, False),
        ("z>1", {"z": "2"}, True),
        ("z>1", {"z": "v2"}, False),
        # ``()`` is the empty value, not no value: a node labelled a="" is not "notin ()"
        ("a notin ()", {"a": ""}, False),
    ],
)
def test_selector_matches(text: str, labels: dict[str, str], matched: bool) -> None:
    """``TestSelectorMatches``, and ``TestRequirementSelectorMatching`` as text."""
    assert label_selector(text).matches("node", labels) is matched


@pytest.mark.parametrize(
    ("label", "matched"),
    [
        ("6", True),
        ("+6", True),
        ("0006", True),
        ("1_0", False),  # Python reads 10; Go reads nothing
        (" 6", False),
        ("\u0666", False),  # an Arabic-Indic six
        ("9223372036854775807", True),
        ("9223372036854775808", False),  # past an int64: nothing
        ("99999999999999999999", False),
        ("-1", False),
        ("", False),
    ],
)
def test_gt_reads_labels_as_go_parses_integers(label: str, matched: bool) -> None:
    """``x>5`` compares the label as ``strconv.ParseInt(v, 10, 64)`` reads it, or not at all."""
    assert label_selector("x>5").matches("node", {"x": label}) is matched


@given(st.text(alphabet="0123456789+-_ ", max_size=30))
def test_int64_is_go_parse_int(text: str) -> None:
    """A sign and ASCII digits within an int64, else nothing."""
    body = text[1:] if text[:1] in "+-" else text
    expected = int(text) if body.isdigit() and -(2**63) <= int(text) < 2**63 else None
    assert int64(text) == expected
