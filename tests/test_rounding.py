"""What a request consumes of a device shared by capacity, rounded as the 1.37 allocator rounds it.

The cases of ``calculateConsumedCapacity`` and ``violatesPolicy`` are those of the allocator's own
tests (``structured/internal/experimental/consumable_capacity_test.go`` in
k8s.io/dynamic-resource-allocation v0.37.2), by their names there, with the quantities they use;
the few that turn on the last unit of an int64 are left out (a quantity is read as a float here).
The end-to-end tier (tests/e2e/test_capacity.py) holds the same rules to kube-scheduler.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdraexp.allocator.facts import DeviceFacts
from kdraexp.allocator.headroom import shares
from kdraexp.allocator.rounding import consumed, consumption, fits, refuses
from kdraexp.dra import gated
from kdraexp.families.resourceslice import D

TOO_BIG_FOR_MILLI = "9224372036854776E3"
"""The allocator's test's ``tooBigForMilli``: its thousandths pass an int64."""


def policy(**fields: Any) -> gated.RequestPolicy:
    """A ``requestPolicy`` as the API takes it (``valid_range`` for ``validRange``...), read."""
    return gated.request_policy(
        {
            {"valid_range": "validRange", "valid_values": "validValues"}.get(key, key): value
            for key, value in fields.items()
        }
    )


@pytest.mark.parametrize(
    ("case", "asked", "value", "request_policy", "expected"),
    [
        ("empty", None, "1", {}, 1),
        ("min in range", None, "2", {"default": "1", "valid_range": {"min": "1"}}, 1),
        ("default in set", None, "2", {"default": "1", "valid_values": ["1"]}, 1),
        ("more than min in range", "2", "2", {"default": "1", "valid_range": {"min": "1"}}, 2),
        ("less than min in range", "1", "2", {"default": "1", "valid_range": {"min": "2"}}, 2),
        (
            "with step (round up)",
            "2",
            "3",
            {"default": "1", "valid_range": {"min": "1", "step": "2"}},
            3,
        ),
        (
            "with step (no remaining)",
            "2",
            "2",
            {"default": "1", "valid_range": {"min": "1", "step": "1"}},
            2,
        ),
        (
            "fractional step round up (0.25 to 0.3)",
            "250m",
            "1",
            {"default": "200m", "valid_range": {"min": "200m", "max": "1", "step": "100m"}},
            0.3,
        ),
        (
            "fractional step already aligned (0.4 = min+2*step)",
            "400m",
            "1",
            {"default": "200m", "valid_range": {"min": "200m", "max": "1", "step": "100m"}},
            0.4,
        ),
        ("valid value in set", "2", "3", {"default": "1", "valid_values": ["1", "2", "3"]}, 2),
        ("set (round up)", "2", "3", {"default": "1", "valid_values": ["1", "3"]}, 3),
        (
            "fractional-step-request-not-milli-representable-is-rejected",
            TOO_BIG_FOR_MILLI,
            TOO_BIG_FOR_MILLI,
            {"default": "1", "valid_range": {"min": "100m", "step": "100m"}},
            None,
        ),
    ],
)
def test_consumed_as_the_allocator_calculates_it(
    case: str, asked: str | None, value: str, request_policy: dict[str, Any], expected: float | None
) -> None:
    """``calculateConsumedCapacity``'s cases: what is consumed, or None where it gives up."""
    amount = consumed(
        policy(**request_policy),
        gated.quantity(value),
        None if asked is None else gated.quantity(asked),
    )
    assert amount == pytest.approx(expected), case


def test_larger_than_every_valid_value_is_refused() -> None:
    """``larger than set``: consumed as asked (3), which ``violatesPolicy`` refuses."""
    allowed = policy(default="1", valid_values=["1", "2"])
    assert not refuses(allowed, 2.0)
    assert refuses(allowed, 3.0)
    assert consumed(allowed, 3.0, 3.0) is None


@pytest.mark.parametrize(
    ("case", "amount", "request_policy", "refused"),
    [
        (
            "less than maximum",
            "1",
            {"default": "1", "valid_range": {"min": "1", "max": "2"}},
            False,
        ),
        ("more than maximum", "2", {"default": "1", "valid_range": {"min": "1", "max": "1"}}, True),
        ("in set", "1", {"default": "1", "valid_values": ["1"]}, False),
        ("not in set", "2", {"default": "1", "valid_values": ["1"]}, True),
        (
            "fractional step aligned (0.3 = min+1*step)",
            "300m",
            {"default": "200m", "valid_range": {"min": "200m", "max": "1", "step": "100m"}},
            False,
        ),
        (
            "fractional step not aligned (0.25 is not a multiple of 0.1 from 0.2)",
            "250m",
            {"default": "200m", "valid_range": {"min": "200m", "max": "1", "step": "100m"}},
            True,
        ),
    ],
)
def test_refused_as_the_allocator_judges_it(
    case: str, amount: str, request_policy: dict[str, Any], refused: bool
) -> None:
    """``violatesPolicy``'s cases."""
    assert refuses(policy(**request_policy), gated.quantity(amount)) is refused, case


def test_above_the_maximum_is_refused_once_rounded() -> None:
    """A request at or below ``max`` may still be refused: rounded up to the step, it passes it."""
    ranged = policy(default="10G", valid_range={"min": "10G", "max": "95G", "step": "10G"})
    assert consumed(ranged, 100e9, 88e9) == 90e9
    assert consumed(ranged, 100e9, 91e9) is None  # 100G, above 95G
    assert consumed(ranged, 100e9, 120e9) is None


def nic(capacity: dict[str, Any], **policies: gated.RequestPolicy) -> DeviceFacts:
    """A device allowing multiple allocations, its capacities as quantities and policies."""
    values = {name: gated.quantity(value) for name, value in capacity.items()}
    defaults = {
        name: (policies[name].default if name in policies else None) or value
        for name, value in values.items()
    }
    return DeviceFacts(
        D.values("s", "nic.example", "p", "nic", ""),
        "nic",
        (),
        (),
        None,
        True,
        values,
        defaults,
        policies=policies or None,
    )


BANDWIDTH = policy(default="60G", valid_values=["60G", "400G"])


def test_consumption_of_every_capacity() -> None:
    """Per capacity: asked and rounded, or its default, or the whole of it when it has none."""
    device = nic({"bandwidth": "400G", "queues": "16", "ports": "2"}, bandwidth=BANDWIDTH)
    assert consumption(device, {"bandwidth": 70e9}) == {
        "bandwidth": 400e9,
        "queues": 16,
        "ports": 2,
    }
    assert consumption(device, {"queues": 3}) == {"bandwidth": 60e9, "queues": 3, "ports": 2}


def test_a_capacity_the_device_lacks_is_never_given() -> None:
    """``requestsContainNonExistCapacity``: the device is skipped."""
    assert consumption(nic({"bandwidth": "400G"}), {"latency": 1}) is None


def test_what_is_left_must_cover_the_rounded_amount() -> None:
    """60G taken of a NIC selling 60G or 400G: 50G fits (60G), 70G does not (400G)."""
    device = nic({"bandwidth": "400G"}, bandwidth=BANDWIDTH)
    taken = {"bandwidth": 60e9}
    assert fits(device, {"bandwidth": 50e9}, taken)
    assert not fits(device, {"bandwidth": 70e9}, taken)
    assert fits(device, {"bandwidth": 70e9}, {})
    assert not fits(device, {"bandwidth": 500e9}, {})
    assert fits(device, {}, taken)  # the default, 60G


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ([], "requestPolicy: expected a map"),
        ({"validRange": "10G"}, "validRange: expected a map"),
        ({"validValues": "10G"}, "validValues: expected a list"),
        ({"default": "ten"}, "not a Kubernetes quantity"),
        ({"validRange": {"min": "-1"}}, "a negative amount"),
        ({"validRange": {"min": "1", "step": "0"}}, "step: must be greater than zero"),
        (  # each kept as a float: 350,000 in each of 12 slices took the memory limit
            {"default": "1", "validValues": [str(n) for n in range(1, 12)]},
            "validValues: 11 values, more than the API server's 10",
        ),
    ],
)
def test_a_policy_that_cannot_be_read(raw: Any, problem: str) -> None:
    with pytest.raises(gated.Unreadable, match=problem):
        gated.request_policy(raw)


def test_a_capacity_no_step_count_reaches_needs_a_default() -> None:
    """A request naming it not consumes all of it: too many steps from min, it cannot be judged."""
    raw = {"validRange": {"min": "0", "step": "1n"}}
    with pytest.raises(gated.Unreadable, match=r"the capacity 1e\+300 is more steps of 1e-09"):
        gated.request_policy(raw, 1e300)
    assert gated.request_policy(raw, 1e299).step == 1e-9
    assert gated.request_policy({**raw, "default": "1"}, 1e300).default == 1
    assert gated.request_policy({"validRange": {"step": "1n"}}, 1e300).min is None


def test_thousandths_as_the_allocator_works_them() -> None:
    """``useMilli``: every bound a whole number of thousandths within an int64, the step 1m+."""
    assert policy(valid_range={"min": "200m", "max": "1", "step": "100m"}).milli
    assert policy(valid_range={"min": "1", "max": "3", "step": "1"}).milli
    assert not policy(valid_range={"min": TOO_BIG_FOR_MILLI, "step": "1"}).milli
    assert not policy(valid_range={"min": "1", "step": "1u"}).milli


QUANTITIES = st.one_of(
    st.sampled_from(["0", "1n", "1m", "1", "1e-300", "1e300", "9223372036854775807", "8Ei"]),
    st.builds(
        "{}{}e{}".format,
        st.sampled_from(["", "-"]),
        st.decimals(0, 10**6, places=3, allow_nan=False).map(str),
        st.integers(-400, 400),
    ),
)
"""Amounts as quantities: zero, the smallest, the largest a float holds, negative, and others."""
POLICIES = st.fixed_dictionaries(
    {},
    optional={
        "default": QUANTITIES,
        "validRange": st.fixed_dictionaries(
            {}, optional={"min": QUANTITIES, "max": QUANTITIES, "step": QUANTITIES}
        ),
        "validValues": st.lists(QUANTITIES, max_size=3).map(sorted),
    },
)


def read(text: str) -> float | None:
    try:
        return gated.quantity(text)
    except gated.Unreadable:
        return None


@settings(max_examples=500, deadline=None)
@given(raw=POLICIES, value=QUANTITIES, asked=st.none() | QUANTITIES, used=QUANTITIES)
def test_no_policy_or_amount_raises(
    raw: dict[str, Any], value: str, asked: str | None, used: str
) -> None:
    """Whatever a slice and a claim say, judging a device is an answer, never an exception."""
    try:
        read_policy = gated.request_policy(raw)
    except gated.Unreadable:
        return  # reported as an invalid value; the capacity is judged without it
    capacity, taken = read(value), read(used)
    if capacity is None or taken is None:
        return
    device = nic({"bandwidth": value}, bandwidth=read_policy)
    wants = {} if asked is None or read(asked) is None else {"bandwidth": read(asked) or 0.0}
    fits(device, wants, {"bandwidth": taken})
    fits(device, wants, {"bandwidth": capacity + taken + 1e308})
    shares(device, {"bandwidth": taken})
