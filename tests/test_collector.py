"""The Collector and the direct encoder write the same samples, for every family.

The direct encoder is the fast path for ``/metrics``; the Collector gives the same rows to
prometheus_client.  On the example cluster and on generated clusters (odd strings included),
prometheus_client's own encoders, fed by the Collector, must write what the direct encoder writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from kdraexp.dra.listing import LIST_ORDER
from kdraexp.exposition import text as exposition
from kdraexp.exposition.collector import CollectionCollector
from kdraexp.families.deviceclass import class_created
from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from kdraexp.store.collection import Collection
from tests.collect import by_kind, collect, collect_kinds
from tests.objects import classy, counters, gpu, new_claim, pool_slice, result

EXAMPLE = Path(__file__).parent.parent / "examples" / "cluster.yaml"
EVERYTHING = select(
    resources=",".join(k.plural for k in LIST_ORDER),
    opt_in=".*",
    options=FamilyOptions.from_flags(
        {
            "expect-pools": ("gpu.nvidia.com=nvidia.com/gpu.present=true",),
            "metric-labels-allowlist": "*=[*]",
            "metric-annotations-allowlist": "*=[*]",
        }
    ),
)

Sample = tuple[str, tuple[tuple[str, str], ...], float]


def read(text: str, openmetrics: bool = False) -> list[Sample]:
    parse = parse_om if openmetrics else text_string_to_metric_families
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in parse(text)
        for s in family.samples
    )


def assert_same(collection: Collection) -> int:
    """Both encoders, both formats; return how many samples were compared."""
    registry = CollectorRegistry()
    registry.register(CollectionCollector(collection))
    ours = b"".join(exposition.encode_collection(collection)).decode()
    theirs = read(generate_latest(registry).decode())
    assert read(ours) == theirs
    assert read(ours + "# EOF\n", openmetrics=True) == read(
        generate_openmetrics(registry).decode(), openmetrics=True
    )
    described = {m.name for m in CollectionCollector(collection).describe()}
    assert described == {family.name for family, _ in collection.families()}
    return len(theirs)


def test_example_cluster_every_family() -> None:
    """Every family of the example cluster, opt-in ones included."""
    collection = collect_kinds(by_kind(EXAMPLE), EVERYTHING)
    assert {f.name for f, _ in collection.families()} == {f.name for f in EVERYTHING.families}
    assert assert_same(collection) > 200


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)  # type: ignore[arg-type]
quantities = st.sampled_from(["1", "80Gi", "9728Mi", "500m", "1e3", "0", "1.5"])


@st.composite
def clusters(draw: st.DrawFn) -> Collection:
    """A cluster of odd names and values: devices, partitions, taints, claims, classes.

    Claims carry labels of odd keys and values: keys that give one label name take
    ``_conflict<N>``, and each claim's series has its own label names.
    """
    pools = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    slices, claims, devices = [], [], []
    for index, pool in enumerate(pools):
        found = []
        for number in range(draw(st.integers(0, 3))):
            name = f"{draw(names)}-{number}"
            extra: dict[str, Any] = {}
            if draw(st.booleans()):
                extra["taints"] = [
                    {"key": draw(names), "value": draw(names), "effect": "NoSchedule"}
                ]
            if draw(st.booleans()):
                extra["consumesCounters"] = [
                    {"counterSet": "set", "counters": counters(memory=draw(quantities))}
                ]
            found.append(gpu(name, draw(st.sampled_from(["gpu", "mig"])), draw(names), **extra))
            devices.append((pool, name))
        shared = [{"name": "set", "counters": counters(memory=draw(quantities))}]
        slices.append(pool_slice(f"s{index}{draw(names)}", found, pool=pool, sharedCounters=shared))
    for index in range(draw(st.integers(0, 4))):
        chosen: list[tuple[str, str]] = (
            draw(st.lists(st.sampled_from(devices), max_size=2, unique=True)) if devices else []
        )
        results = [result(device, pool, adminAccess=draw(st.booleans())) for pool, device in chosen]
        pending = not chosen and draw(st.booleans())
        made = new_claim(f"c{index}", None if pending else results, draw(names))
        made["metadata"]["labels"] = draw(st.dictionaries(names, names, max_size=3))
        claims.append(made)
    classes = [classy("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'", "2.5")]
    return collect(claims=claims, slices=slices, classes=classes, selection=EVERYTHING)


@settings(max_examples=60)
@given(clusters())
def test_generated_clusters(collection: Collection) -> None:
    """Odd label values and many shapes: the two encoders agree."""
    assert_same(collection)


@given(st.floats(allow_nan=False))
def test_values_agree(value: float) -> None:
    """Any float value is written the same by both (the direct encoder in Go's number format)."""
    assert assert_same(Collection.of([(class_created, [("c", value)])])) == 1
