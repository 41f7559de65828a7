"""The hourly-cost annotation: its accepted and rejected inputs, and what it prices."""

from __future__ import annotations

import sys
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdraexp.allocator.facts import DeviceFacts
from kdraexp.allocator.idlecost import price
from kdraexp.allocator.index import CostSum
from kdraexp.families.deviceclass import HourlyCostError, parse_hourly_cost
from kdraexp.families.resourceslice import D
from tests.collect import collect, text, values
from tests.objects import classy, counters, gpu, new_claim, pool_slice, result

SHAPE = "expected a non-negative decimal with a dot separator"
RANGE = "hourly cost is outside the finite float64 range"


@pytest.mark.parametrize(
    ("raw", "cost"),
    [
        ("0", 0.0),
        ("0.00", 0.0),
        (" 2.50 ", 2.5),
        ("001.25", 1.25),
        ("\u00a03\u3000", 3.0),
        ("\u2028 7.5\t\n", 7.5),
        ("0." + "0" * 400 + "1", 0.0),
    ],
)
def test_accepted(raw: str, cost: float) -> None:
    """Valid costs, Unicode whitespace trimmed as Go trims it, underflow to 0 accepted."""
    assert parse_hourly_cost(raw) == cost


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "NaN",
        "Inf",
        "+Inf",
        "-Inf",
        "-1",
        "1,234",
        "1,23",
        "1.234,56",
        "1,234.56",
        "1e3",
        "0x1p2",
        "1_000",
        ".5",
        "1.",
        "+2",
        " ",
        "\u3000",
        "١٢",
        "\uff11\uff12",  # fullwidth digits
        "1.5\u001c",
        "\u001f1",
    ],
)
def test_rejected_shape(raw: str) -> None:
    """Everything but ASCII digits[.digits] after trimming: the original's 17 and more."""
    with pytest.raises(HourlyCostError, match=SHAPE):
        parse_hourly_cost(raw)


def test_rejected_range() -> None:
    """A number beyond float64 is refused, not reported as +Inf."""
    with pytest.raises(HourlyCostError, match=RANGE):
        parse_hourly_cost("9" * 400)


H200 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"'
OVERLAPPING = [classy("any-gpu", None, "3.50"), classy("h200", H200, "5.00")]
"""Two classes selecting the same H200s: a generic one and a per-model one."""


def asking(name: str, deviceclass: str, device: str) -> dict[str, Any]:
    requests = [{"name": "gpu", "exactly": {"deviceClassName": deviceclass}}]
    return new_claim(name, [result(device)], requests=requests)


def test_a_claim_pays_for_the_class_it_named() -> None:
    """The same H200 costs 3.50 through the generic class and 5.00 through the per-model one."""
    slices = [pool_slice("s", [gpu("g0", product="NVIDIA H200"), gpu("g1", product="NVIDIA H200")])]
    claims = [asking("cheap", "any-gpu", "g0"), asking("dear", "h200", "g1")]
    written = collect(slices=slices, claims=claims, classes=OVERLAPPING)
    assert values(
        written, "kube_resourceclaim_hourly_cost", "resourceclaim_name", "deviceclass_name"
    ) == {("cheap", "any-gpu"): 3.5, ("dear", "h200"): 5.0}


def test_a_device_is_priced_by_the_dearest_class_with_a_valid_cost() -> None:
    """Classes without a cost, or with one that does not parse, price nothing; 0.00 is a price."""
    device = DeviceFacts(
        labels=D.values("s", "d", "p", "g", "n"),
        name="g",
        taints=(),
        consumes=(),
        share_capacity=None,
        shareable=False,
        classes=("free", "unpriced", "generic", "per-model"),
    )
    assert price({"generic": 3.5, "per-model": 5.0, "free": 0.0}, device) == 5.0
    assert price({"free": 0.0}, device) == 0.0
    assert price({"elsewhere": 9.0}, device) is None
    listed = collect(
        slices=[pool_slice("s", [gpu("g", product="NVIDIA H200")])],
        classes=[*OVERLAPPING, classy("typo", None, "9,99"), classy("none", None)],
    )
    idle = values(listed, "kube_resourcepool_idle_hourly_cost", "pool")
    assert idle == {("pool",): 5.0}


LARGEST = str(int(sys.float_info.max))
"""The largest finite float64 written out: a valid hourly-cost, and absurd."""


def test_a_cost_past_float64_is_not_written_as_infinite() -> None:
    """Two devices at the largest price: their sum is no number, and is said so, not +Inf.

    The class's own cost is what it says.  The pool's idle cost, and a claim holding both,
    were written +Inf; a partition priced so priced its GPU at nothing, silently.
    """
    dear = classy("dear", None, LARGEST)
    asks = [{"name": "gpu", "exactly": {"deviceClassName": "dear", "count": 2}}]
    every = counters(memory_slice_0="1", memory_slice_1="1")
    half = [{"counterSet": "g", "counters": counters(memory_slice_0="1")}]
    slices = [
        pool_slice("s", [gpu("g0"), gpu("g1")]),
        pool_slice("c", pool="mig", count=2, sharedCounters=[{"name": "g", "counters": every}]),
        pool_slice("d", [gpu("p0", "mig", consumesCounters=half)], pool="mig", count=2),
    ]
    idle = collect(slices=slices, classes=[dear])
    assert values(idle, "kube_deviceclass_hourly_cost", "deviceclass_name") == {
        ("dear",): sys.float_info.max
    }
    assert values(idle, "kube_resourcepool_idle_hourly_cost", "pool") == {}
    said = [(p.resource, p.field, p.message) for p in idle.problems]
    assert said == [
        (
            "deviceclasses",
            "hourly-cost",
            f"pool gpu.nvidia.com/{pool} node {node!r}: the idle hourly cost of its priced "
            "devices is past the largest float64, so it is not written",
        )
        for pool, node in (("pool", "pool"), ("mig", "mig"))
    ]
    held = collect(
        slices=slices[:1],
        classes=[dear],
        claims=[new_claim("both", [result("g0"), result("g1")], requests=asks)],
    )
    assert values(held, "kube_resourceclaim_hourly_cost", "resourceclaim_name") == {}
    assert [(p.field, p.message) for p in held.problems] == [
        (
            "hourly-cost",
            "ResourceClaim workloads/both: the hourly cost of its devices of DeviceClass dear "
            "is past the largest float64, so it is not written",
        )
    ]


MIG = classy("mig", 'device.attributes["gpu.nvidia.com"].type == "mig"', "0.60")


def test_decimal_prices_sum_to_the_decimal_they_are() -> None:
    """Three partitions at 0.60 cost 1.8, held or idle; adding 0.6 thrice gives 1.7999999999999998.

    Shares of a shareable device are exact too (10G and 20G of 100G at 0.60: 0.18; their
    shares added as floats are 0.30000000000000004, priced 0.18000000000000002), and so is a
    partitioned GPU's idle cost
    worked out from a partition's price (three GPUs idle, each priced by a 1g partition at 0.60
    that takes an eighth of it: 14.4, where 4.8 added thrice is 14.399999999999999).
    """
    partitions = [gpu(f"p{i}", "mig") for i in range(3)]
    three = [{"name": "gpu", "exactly": {"deviceClassName": "mig", "count": 3}}]
    held = collect(
        slices=[pool_slice("s", partitions)],
        classes=[MIG],
        claims=[new_claim("three", [result(f"p{i}") for i in range(3)], requests=three)],
    )
    assert text_of(held, "kube_resourceclaim_hourly_cost") == [
        'kube_resourceclaim_hourly_cost{namespace="workloads",resourceclaim_name="three",'
        'deviceclass_name="mig"} 1.8'
    ]
    idle = collect(slices=[pool_slice("s", partitions)], classes=[MIG])
    assert text_of(idle, "kube_resourcepool_idle_hourly_cost") == [
        'kube_resourcepool_idle_hourly_cost{driver="gpu.nvidia.com",pool="pool",node_name="pool"}'
        " 1.8"
    ]
    shared = gpu("nic", "mig", capacity={"memory": "100G"}, allowMultipleAllocations=True)
    shares = [
        result("nic", shareID=f"s{i}", consumedCapacity={"memory": amount})
        for i, amount in enumerate(("10G", "20G"))
    ]
    two = [{"name": "gpu", "exactly": {"deviceClassName": "mig"}}]
    split = collect(
        slices=[pool_slice("s", [shared])],
        classes=[MIG],
        claims=[new_claim("shares", shares, requests=two)],
    )
    assert values(split, "kube_resourceclaim_hourly_cost", "resourceclaim_name") == {
        ("shares",): 0.18
    }
    eighth = [{"counterSet": "", "counters": counters(memory_slice_0="1")}]
    every = counters(**{f"memory_slice_{i}": "1" for i in range(8)})
    sets, devices = [], []
    for index in range(3):
        sets.append({"name": f"gpu-{index}", "counters": every})
        consumes = [{**eighth[0], "counterSet": f"gpu-{index}"}]
        devices.append(gpu(f"1g-{index}", "mig", consumesCounters=consumes))
    gpus = collect(
        slices=[
            pool_slice("c", pool="mig", count=2, sharedCounters=sets),
            pool_slice("d", devices, pool="mig", count=2),
        ],
        classes=[MIG],
    )
    assert text_of(gpus, "kube_resourcepool_idle_hourly_cost") == [
        'kube_resourcepool_idle_hourly_cost{driver="gpu.nvidia.com",pool="mig",node_name="mig"}'
        " 14.4"
    ]


@given(
    st.lists(
        st.tuples(
            st.decimals(0, 1000, places=2).map(lambda d: float(d)),
            st.sampled_from([1.0, 0.5, 0.25, 0.1, 1 / 3, 0.0]),
            st.sampled_from([1.0, 0.125, 1 / 7, 3.0]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_cost_sums_are_rounded_once(terms: list[tuple[float, float, float]]) -> None:
    """Whatever the terms, the sum is the exact one (decimal prices, exact shares) rounded."""
    summed = CostSum()
    for price_, share, of in terms:
        summed.add(price_, share, of)
    exact = sum(Fraction(repr(p)) * Fraction(s) / Fraction(o) for p, s, o in terms)
    assert summed.total() == float(exact)


def text_of(collection: Any, family: str) -> list[str]:
    """The sample lines of one family, as written."""
    return [line for line in text(collection).splitlines() if line.startswith(family + "{")]
