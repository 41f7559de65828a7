"""The direct encoder says what prometheus_client's says, in the original's number format."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from kdraexp.allocator.scopes import Per
from kdraexp.exposition import text as exposition
from kdraexp.exposition.text import format_value
from kdraexp.families.family import CLUSTER, family
from kdraexp.store.collection import Collection

TWO_LABELS = family(
    "kube_test_two_labels",
    "Two labels, written in declaration order.",
    ("namespace", "class"),
    CLUSTER,
    "",
    per=Per.POOL,
)(lambda _: ())


def one_family(rows: list[Any], declared: object = TWO_LABELS) -> Collection:
    return Collection.of([(declared, rows)])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.0, "0"),
        (-0.0, "0"),
        (16.0, "16"),
        (2.5, "2.5"),
        (3.25, "3.25"),
        (1073741824.0, "1.073741824e+09"),
        (123456.0, "123456"),
        (999999.0, "999999"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (1e21, "1e+21"),
        (0.0001, "0.0001"),
        (1e-5, "1e-05"),
        (0.00012345, "0.00012345"),
        (-1.5, "-1.5"),
        (1e-9, "1e-09"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
        (0.1, "0.1"),
    ],
)
def test_go_format(value: float, text: str) -> None:
    """strconv.FormatFloat(v, 'g', -1, 64), as client_golang writes values."""
    assert format_value(value) == text


@given(st.floats(allow_nan=False))
def test_format_round_trips(value: float) -> None:
    """The text reads back as the same float."""
    assert float(format_value(value)) == value or (value == 0 and float(format_value(value)) == 0)


label_text = st.text(st.characters(codec="utf-8"), max_size=8)


@given(st.lists(st.tuples(label_text, label_text, st.floats(allow_nan=False)), max_size=20))
def test_same_samples_as_prometheus_client(rows: list[tuple[str, str, float]]) -> None:
    """Parsed, the direct encoder's output equals prometheus_client's for the same samples."""
    written = []
    reference = GaugeMetricFamily(TWO_LABELS.name, TWO_LABELS.help, labels=["class", "namespace"])
    seen = set()
    for name, namespace, value in rows:
        if (name, namespace) in seen:
            continue
        seen.add((name, namespace))
        written.append((namespace, name, value))
        reference.add_metric([name, namespace], value)

    class One(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield reference

    registry = CollectorRegistry()
    registry.register(One())
    ours = b"".join(exposition.encode_collection(one_family(written))).decode()
    theirs = generate_latest(registry).decode()

    def read(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for f in text_string_to_metric_families(text)
            for s in f.samples
        )

    assert read(ours) == read(theirs)


def test_empty_families_omitted() -> None:
    """A collection without rows writes nothing, as the original does."""
    assert list(exposition.encode_collection(Collection.of([]))) == []


@pytest.mark.parametrize(
    ("header", "allowed"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("deflate", False),
        ("", False),
        (None, False),
        ("gzip;q=0", False),
        ("gzip;q=0.5", True),
        ("*", True),
        ("GZIP", True),
        ("gzip;q=x", False),
    ],
)
def test_gzip_accepted(header: str | None, allowed: bool) -> None:
    """Accept-Encoding parsing."""
    assert exposition.gzip_accepted(header) is allowed
