"""Node selectors: read as the node-affinity code reads them, written for people, and families."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdraexp.dra.gated import Unreadable
from kdraexp.dra.nodeselector import NAME_FIELD, NodeLabels, NodeSelector, Requirement, read
from tests.collect import collect, values
from tests.objects import gpu, new_claim, pool_slice, result


def _selector(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeSelectorTerms": list(terms)}


def _read(selector: Any) -> Any:
    return read(msgspec.Raw(msgspec.json.encode(selector)))


RACK = _selector(
    {
        "matchExpressions": [
            {"key": "rack", "operator": "In", "values": ["r1", "r2"]},
            {"key": "gpu", "operator": "Exists"},
            {"key": "drain", "operator": "DoesNotExist"},
            {"key": "zone", "operator": "NotIn", "values": ["z9"]},
        ]
    },
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["spare"]}]},
    {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["64"]}]},
)


def test_read_and_written_as_terms_and_requirements() -> None:
    """Terms joined by ``||``, requirements by ``, ``; a name field as ``name=``."""
    selector = _read(RACK)
    assert selector.text == (
        "rack in (r1,r2), gpu, !drain, zone notin (z9) || name=spare || cores > 64"
    )
    assert selector.node == ""
    assert _read(_selector({"matchFields": [NODE_A]})).node == "a"


NODE_A = {"key": "metadata.name", "operator": "In", "values": ["a"]}


@pytest.mark.parametrize(
    ("name", "labels", "selected"),
    [
        ("n1", {"rack": "r1", "gpu": ""}, True),
        ("n1", {"rack": "r1", "gpu": "", "drain": "yes"}, False),  # DoesNotExist
        ("n1", {"rack": "r1", "gpu": "", "zone": "z9"}, False),  # NotIn
        ("n1", {"rack": "r3", "gpu": ""}, False),
        ("n1", {"gpu": ""}, False),  # In: the label must be there
        ("n1", {"zone": "z1"}, False),
        ("spare", {}, True),  # the second term
        ("n1", {"cores": "128"}, True),  # Gt, as integers
        ("n1", {"cores": "64"}, False),
        ("n1", {"cores": "many"}, False),
    ],
)
def test_terms_are_alternatives_and_requirements_all_hold(
    name: str, labels: dict[str, str], selected: bool
) -> None:
    assert _read(RACK).matches(name, labels) is selected


@pytest.mark.parametrize(
    ("operator", "bound", "label", "selected"),
    [
        ("Gt", "64", "128", True),
        ("Gt", "64", "+128", True),
        ("Gt", "64", "000128", True),
        ("Gt", "64", "1_28", False),  # Python reads 128; strconv.ParseInt reads nothing
        ("Gt", "64", " 128", False),
        ("Gt", "64", "\u0661\u0662\u0668", False),  # Arabic-Indic digits
        ("Gt", "64", "99999999999999999999", False),  # past an int64
        ("Gt", "64", "9223372036854775807", True),
        ("Lt", "64", "-9223372036854775808", True),
        ("Lt", "64", "-9223372036854775809", False),
        ("Lt", "1_00", "5", False),  # a bound read as nothing matches nothing
        ("Lt", "-1", "-2", True),
    ],
)
def test_gt_and_lt_read_integers_as_go_does(
    operator: str, bound: str, label: str, selected: bool
) -> None:
    """``Gt`` and ``Lt`` read the label and the bound as ``strconv.ParseInt(v, 10, 64)``."""
    term = {"matchExpressions": [{"key": "cores", "operator": operator, "values": [bound]}]}
    assert _read(_selector(term)).matches("n1", {"cores": label}) is selected


def test_a_term_without_requirements_matches_no_node() -> None:
    assert not _read(_selector({})).matches("n1", {})
    assert not _read(_selector()).matches("n1", {})


@pytest.mark.parametrize(
    "term",
    [
        {"matchExpressions": [{"key": "rack", "operator": "Near", "values": ["r1"]}]},
        {"matchFields": [{"key": "metadata.labels", "operator": "In", "values": ["x"]}]},
        {"matchExpressions": [{"operator": "Exists"}]},
    ],
)
def test_what_is_not_a_node_selector_is_unreadable(term: dict[str, Any]) -> None:
    with pytest.raises(Unreadable):
        _read(_selector(term))
    assert read(msgspec.Raw(b"null")) is None


def test_slices_and_devices_say_which_nodes_they_serve() -> None:
    """A multi-host pool's slice, and devices with their own selector, each one row."""
    channels = pool_slice(
        "channels", [gpu("ch-0"), gpu("ch-1")], pool="channels", nodeSelector=RACK
    )
    del channels["spec"]["nodeName"]
    own = pool_slice(
        "own",
        [
            {**gpu("d0"), "nodeSelector": _selector({"matchFields": [NODE_A]})},
            {**gpu("d1"), "nodeName": "b"},
        ],
        pool="own",
        perDeviceNodeSelection=True,
    )
    del own["spec"]["nodeName"]
    bad = pool_slice(
        "bad",
        [gpu("x")],
        pool="bad",
        nodeSelector=_selector(*[{"matchExpressions": [{"key": "k", "operator": "Near"}]}]),
    )
    del bad["spec"]["nodeName"]
    collection = collect(slices=[channels, own, bad])
    assert values(
        collection,
        "kube_resourceslice_node_selector_info",
        "resourceslice_name",
        "device_name",
        "selector",
    ) == {
        ("channels", "", _read(RACK).text): 1.0,
        ("own", "d0", "name=a"): 1.0,
    }
    assert [p.field for p in collection.problems] == ["nodeSelector"]


def test_an_allocation_names_its_node_or_its_nodes() -> None:
    """node_name where the allocation's selector names one node, else ""; no selector, no row."""
    one, several, network = (
        new_claim(name, [result("gpu-0")]) for name in ("one", "several", "network")
    )
    one["status"]["allocation"]["nodeSelector"] = _selector({"matchFields": [NODE_A]})
    several["status"]["allocation"]["nodeSelector"] = RACK
    collection = collect(claims=[one, several, network])
    assert values(
        collection,
        "kube_resourceclaim_allocation_node_info",
        "resourceclaim_name",
        "node_name",
        "selector",
    ) == {("one", "a", "name=a"): 1.0, ("several", "", _read(RACK).text): 1.0}


def test_one_selector_read_once() -> None:
    """Claims on one node carry the same selector: read once, its text and node with it."""
    one_node = _selector(
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]}
    )
    first, again = _read(one_node), _read(one_node)
    assert first is again
    assert (first.node, first.text) == ("gpu-7", "name=gpu-7")
    unreadable = _selector({"matchFields": [{"key": "x", "operator": "In"}]})
    for _ in range(2):  # refused each time it is read, never kept as something read
        with pytest.raises(Unreadable):
            _read(unreadable)


_KEYS = st.sampled_from(["rack", "gpu", "cores", "zone"])
_VALUES = st.sampled_from(["r1", "r2", "7", "64", "65", "-1", "1_0", ""])
_REQUIREMENT = st.one_of(
    st.builds(
        Requirement,
        _KEYS,
        st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
        st.lists(_VALUES, max_size=3).map(tuple),
    ),
    st.builds(
        Requirement,
        st.just(NAME_FIELD),
        st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
        st.lists(st.sampled_from(["n0", "n1", "n5", "9"]), max_size=3).map(tuple),
        st.just(True),
    ),
)
_NODES = st.dictionaries(
    st.sampled_from([f"n{i}" for i in range(8)] + ["9", "12"]),
    st.dictionaries(_KEYS, _VALUES, max_size=4),
    max_size=10,
)


@given(
    st.lists(st.lists(_REQUIREMENT, max_size=3).map(tuple), max_size=3).map(tuple),
    _NODES,
)
@settings(max_examples=400, deadline=None)
def test_nodes_selected_by_set_are_the_nodes_it_matches(
    terms: tuple[tuple[Requirement, ...], ...], nodes: dict[str, dict[str, str]]
) -> None:
    """Answered for every node at once, a selector selects what it matches node by node."""
    selector = NodeSelector(terms)
    expected = {name for name, labels in nodes.items() if selector.matches(name, labels)}
    assert selector.selected(NodeLabels(nodes.items())) == expected
