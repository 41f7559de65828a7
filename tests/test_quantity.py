"""Kubernetes quantities, checked against an exact decimal reference."""

from __future__ import annotations

from contextlib import suppress
from decimal import ROUND_UP, Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdraexp.dra.quantity import QuantityError, parse_quantity

SUFFIXES: dict[str, int | Decimal] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 1073741824.0),
        ("16", 16.0),
        ("2", 2.0),
        ("500m", 0.5),
        ("40Gi", 42949672960.0),
        ("1k", 1000.0),
        ("1e3", 1000.0),
        ("1E3", 1000.0),
        ("-1Gi", -1073741824.0),
        ("+2", 2.0),
        ("0", 0.0),
        ("1.5Gi", 1610612736.0),
        ("100G", 1e11),
        ("9728Mi", 10200547328.0),
        ("1n", 1e-9),
        ("0.1n", 1e-9),
        ("1e-12", 1e-9),
        ("-1e-12", -1e-9),
        ("1.1", 1.1),
        (".5", 0.5),
        ("1.", 1.0),
        ("2e-3", 0.002),
        ("16Ei", float(2**63 - 1)),
    ],
)
def test_known_values(text: str, value: float) -> None:
    """Examples from the original and from the apimachinery rules."""
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Gi",
        "1 Gi",
        "1Gi ",
        "1.2.3",
        "1e",
        "1e+",
        "e3",
        "1Xi",
        "1Kii",
        "0x10",
        "1,5",
        "١٢",
        "--1",
        "1KiB",
        "NaN",
        "Inf",
    ],
)
def test_rejected(text: str) -> None:
    """Anything else is a QuantityError (a ValueError)."""
    with pytest.raises(QuantityError):
        parse_quantity(text)


def reference(sign: str, integer: str, fraction: str, suffix: str) -> float:
    """The exact value, rounded up to 1n as Kubernetes rounds, as the nearest float."""
    value = Decimal(f"{integer or '0'}.{fraction or '0'}") * Decimal(SUFFIXES[suffix])
    if value and int(value.as_tuple().exponent) < -9:
        value = value.quantize(Decimal("1e-9"), rounding=ROUND_UP)
    if suffix.endswith("i"):
        value = min(value, Decimal(2**63 - 1))
    return float(-value if sign == "-" else value)


digits = st.text("0123456789", min_size=0, max_size=12)


@given(st.sampled_from(["", "+", "-"]), digits, digits, st.sampled_from(sorted(SUFFIXES)))
def test_matches_decimal_reference(sign: str, integer: str, fraction: str, suffix: str) -> None:
    """Every sign, digits and suffix combination gives the exact value's nearest float."""
    if not (integer or fraction):
        return
    text = f"{sign}{integer}" + (f".{fraction}" if fraction else "") + suffix
    assert parse_quantity(text) == reference(sign, integer, fraction, suffix)


@given(st.integers(-(10**6), 10**6), st.integers(-30, 30))
def test_exponents(mantissa: int, exponent: int) -> None:
    """Decimal exponents scale exactly."""
    value = Decimal(mantissa).scaleb(exponent)
    if value and value.copy_abs() < Decimal("1e-9"):
        value = Decimal("1e-9").copy_sign(value)
    elif int(value.as_tuple().exponent) < -9:
        value = value.quantize(Decimal("1e-9"), rounding=ROUND_UP)
    assert parse_quantity(f"{mantissa}e{exponent}") == float(value)


@given(st.text(max_size=12))
def test_only_value_errors(text: str) -> None:
    """Arbitrary text either parses or raises QuantityError, nothing else."""
    with suppress(QuantityError):
        parse_quantity(text)
