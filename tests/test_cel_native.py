"""Simple selectors evaluated without the CEL process, as CEL evaluates them."""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kdraexp.cel import matching
from kdraexp.cel.device import SelectorView
from kdraexp.cel.matching import Matcher, Selector, device_paths, string_literals
from kdraexp.cel.native import native
from kdraexp.cel.process import Evaluator
from kdraexp.dra import wire
from tests.collect import EVALUATOR, collect, values
from tests.objects import classy, gpu, pool_slice

NVIDIA = "gpu.nvidia.com"
GPU = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"


SPLIT = [
    "device.driver = = 'gpu.nvidia.com'",
    "device.driver ! = 'other.example'",
    "device.driver == 'gpu.nvidia.com' & & device.driver != 'x'",
    "device.driver == 'gpu.nvidia.com' & /* */ & device.driver != 'x'",
    "device.driver == 'gpu.nvidia.com' &// a comment\n& device.driver != 'x'",
    "device.driver =\n= 'gpu.nvidia.com'",
    "device.driver\u00a0== 'gpu.nvidia.com'",  # no space to CEL: it takes \t\n\f\r and ' '
    "device.driver ==\v'gpu.nvidia.com'",
    "device.driver\x1c== 'gpu.nvidia.com'",
    "device.driver == 'gpu.nvidia.com\r'",  # a plain string holds no line break
]
"""Refused by CEL (and by the API server), however close to the simple form they read."""


@pytest.mark.parametrize(
    "expression",
    [
        GPU,
        'device.driver != "x"',
        "'gpu' == device.attributes['gpu.nvidia.com']['type']",
        "device.attributes['resource.kubernetes.io'].pciBusID == '0000:17:00.0'",
        "device.attributes['d'].count == 3 && device.attributes['d'].on == true",
        "device.attributes['d'].count != 0 // a comment",
        "device.driver\r\n==\f'x' &&\tdevice.driver != 'y'",  # every space CEL knows
    ],
)
def test_simple_forms_are_evaluated_here(expression: str) -> None:
    assert native(expression) is not None


@pytest.mark.parametrize(
    "expression",
    [
        "device.driver == 5",  # does not compile in Kubernetes: for CEL to say
        "device.driver == 'a' || device.driver == 'b'",
        "(device.driver == 'a')",
        "device.attributes['d'].in == 'x'",  # a reserved word
        "device.attributes['d'].type.startsWith('g')",
        "device.attributes['d'].count > 3",
        "device.attributes['d'].count == -3",
        "device.attributes['d'].count == 0x3",
        "device.attributes['d'].count == 3u",
        "device.attributes['d'].ver == 'a\\'b'",
        "device.attributes[r'd'].type == 'gpu'",
        "device.capacity['d'].memory == '1Gi'",
        "device.allowMultipleAllocations",
        "device.driver == 'a' &&",
        "device.driver == 'a' && true",
        "device.attributes['d'].count == 9223372036854775808",
        *SPLIT,
    ],
)
def test_anything_else_is_for_cel(expression: str) -> None:
    assert native(expression) is None


_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "type": st.sampled_from([{"string": "gpu"}, {"string": "mig"}, {"int": 3}]),
    "count": st.sampled_from([{"int": 0}, {"int": 3}, {"string": "3"}, {"bool": True}]),
    "on": st.sampled_from([{"bool": True}, {"bool": False}, {"string": "true"}]),
    "ver": st.sampled_from([{"version": "1.2.3"}, {"string": "1.2.3"}]),
    "resource.kubernetes.io/pciBusID": st.sampled_from(
        [{"string": "0000:17:00.0"}, {"string": "0000:18:00.0"}]
    ),
}
_ATTRIBUTES = st.fixed_dictionaries({}, optional=_VALUES)
_LITERALS = st.sampled_from(
    ["'gpu'", "'mig'", "'3'", "'1.2.3'", "'0000:17:00.0'", "0", "3", "true", "false"]
)
_FIELDS = st.sampled_from(
    [
        "device.attributes['gpu.nvidia.com'].type",
        "device.attributes['gpu.nvidia.com']['count']",
        "device.attributes['gpu.nvidia.com'].on",
        "device.attributes['gpu.nvidia.com'].ver",
        "device.attributes['resource.kubernetes.io'].pciBusID",
        "device.attributes['other.example'].type",
    ]
)
_ATTRIBUTE_CLAUSES = st.builds(
    lambda field, op, value, flip: f"{value} {op} {field}" if flip else f"{field} {op} {value}",
    _FIELDS,
    st.sampled_from(["==", "!="]),
    _LITERALS,
    st.booleans(),
)
_DRIVER_CLAUSES = st.builds(
    lambda op, driver: f"device.driver {op} '{driver}'",
    st.sampled_from(["==", "!="]),
    st.sampled_from([NVIDIA, "other.example"]),
)
_EXPRESSIONS = st.lists(st.one_of(_ATTRIBUTE_CLAUSES, _DRIVER_CLAUSES), min_size=1, max_size=3)


def _device(driver: str, attributes: dict[str, Any]) -> SelectorView:
    raw = {key: msgspec.Raw(json.dumps(value).encode()) for key, value in attributes.items()}
    return SelectorView.for_selectors(wire.Device(name="d", attributes=raw), driver)


def _cel(expression: str, device: SelectorView) -> bool | str:
    """CEL's own answer, from the evaluation process."""
    selector = Selector(expression, device_paths(expression), tuple(string_literals(expression)))
    (answer,) = EVALUATOR.evaluate([expression], [matching._build(selector, device)], [(0, 0)])
    assert isinstance(answer, (bool, str))
    return answer


@pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL engine on this platform")
@given(st.sampled_from([NVIDIA, "other.example"]), _ATTRIBUTES, _EXPRESSIONS)
@example(NVIDIA, {"type": {"string": "gpu"}}, [GPU])
@example(NVIDIA, {}, ["device.attributes['gpu.nvidia.com'].type == 'gpu'", "0 == 3"])
def test_an_answer_given_here_is_cels(
    driver: str, attributes: dict[str, Any], clauses: list[str]
) -> None:
    """Wherever the answer is given here, the CEL process gives the same one.

    Absent attributes and other types than the literal's are left to CEL, unless a clause is
    certainly False (CEL's ``&&`` is then False, an error on the other side or not).
    """
    expression = " && ".join(clauses)
    evaluated = native(expression)
    if evaluated is None:  # "0 == 3" is no device field: not of the form
        return
    device = _device(driver, attributes)
    answer = evaluated(device)
    if answer is not None:
        assert answer == _cel(expression, device)


@pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL engine on this platform")
def test_a_cluster_of_simple_classes_needs_no_process() -> None:
    """Simple classes are matched with no evaluation process started, and where none starts."""
    devices = [
        _device(NVIDIA, {"type": {"string": "gpu"}}),
        _device(NVIDIA, {"type": {"string": "mig"}}),
        _device("other.example", {}),
    ]
    matcher = Matcher(Evaluator())
    try:
        (gpu,) = matcher.compile_all([(GPU,)])
        assert matcher.match_all([(gpu, device) for device in devices]) == [True, False, False]
        assert matcher.evaluator._process is None  # never started
    finally:
        matcher.close()
    broken = Matcher(Evaluator([sys.executable, "-c", "raise SystemExit(3)"]))
    try:
        gpu, other = broken.compile_all([(GPU,), ("device.attributes['d'].x.size() > 0",)])
        assert broken.match_all([(gpu, device) for device in devices]) == [True, False, False]
        assert other.error is not None and matching.transient(other.error)
    finally:
        broken.close()


@pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL engine on this platform")
@pytest.mark.parametrize("expression", SPLIT)
def test_what_cel_refuses_matches_nothing(expression: str) -> None:
    """A selector CEL refuses matches nothing and counts a CEL error, however simple it reads.

    ``= =`` was read here as ``==``: the class matched every GPU and counted no error.
    """
    written = collect(
        slices=[pool_slice("s", [gpu("a"), gpu("b")])],
        classes=[classy("split", expression), classy("fine", "device.driver == 'gpu.nvidia.com'")],
    )
    assert values(written, "kube_resourceslice_device_class", "deviceclass_name") == {("fine",): 1}
    assert written.class_errors == {"split": 2}
    assert "Syntax error" in written.class_error_messages["split"]


_SEPARATORS = st.sampled_from(
    [" ", "", "\t", "\n", "\r\n", "\f", "\u00a0", "\v", "\x1c", "\u2028", "// c\n", "/* */"]
)


@st.composite
def _spelled(draw: st.DrawFn) -> str:
    """A simple selector's tokens, each followed by a separator CEL may or may not take."""
    pieces = ["device", ".", "driver", "==", "'gpu.nvidia.com'"]
    for _ in range(draw(st.integers(0, 1))):
        pieces += ["&&", "device", ".", "attributes", "[", "'d'", "]", ".", "type", "!=", "3"]
    split = {"==": ["=", "="], "!=": ["!", "="], "&&": ["&", "&"]}
    spelled = ""
    for piece in pieces:
        for part in split[piece] if piece in split and draw(st.booleans()) else [piece]:
            spelled += part + draw(_SEPARATORS)
    return spelled


@pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL engine on this platform")
@given(_spelled())
@example("device.driver = = 'gpu.nvidia.com'")
@example("device.driver\u00a0== 'gpu.nvidia.com'")
def test_what_is_read_here_compiles(expression: str) -> None:
    """Whatever is read as the simple form here, CEL compiles: the two never disagree on it."""
    if native(expression) is not None:
        assert EVALUATOR.compile([expression]) == [None], repr(expression)
