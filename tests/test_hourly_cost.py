"""The hourly-cost annotation: the original's accepted and rejected inputs, and more."""

from __future__ import annotations

import pytest

from kdraexp.families.deviceclass import HourlyCostError, parse_hourly_cost

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
