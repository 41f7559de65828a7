"""The Kubernetes CEL libraries a selector may call, in plain Python, for every engine.

``quantity()`` and ``semver()`` with their members (``compareTo``, ``isGreaterThan``, ``asInteger``,
``add``...), and the string extension's functions for an engine that has none of its own.
Values are those of :mod:`kdraexp.cel.values`.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from kdraexp.cel.values import QUANTITY, SEMVER, canonical, quantity_value, semver_value
from kdraexp.dra.quantity import QuantityError, parse_quantity_exact


def quantity_of(value: Any) -> Decimal:
    """The exact decimal of a CEL quantity.

    :raises TypeError: when *value* is not one.
    """
    if isinstance(value, dict) and QUANTITY in value:
        return Decimal(value[QUANTITY])
    raise TypeError("expected a quantity")


def semver_of(value: Any) -> tuple[int, int, int, tuple[Any, ...]]:
    """(major, minor, patch, pre-release precedence) of a CEL semver.

    :raises TypeError: when *value* is not one.
    """
    if not (isinstance(value, dict) and SEMVER in value):
        raise TypeError("expected a semver")
    core, _, pre = value[SEMVER].partition("-")
    major, minor, patch = (int(part) for part in core.split("."))
    # Precedence: a release is above its pre-releases; numeric identifiers below alphanumeric.
    identifiers: tuple[Any, ...] = (
        tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
        if pre
        else ((2, 0, ""),)
    )
    return major, minor, patch, identifiers


def compare(left: Any, right: Any) -> int:
    """-1, 0 or 1: two quantities or two semvers compared, as ``compareTo`` does."""
    if isinstance(left, dict) and QUANTITY in left:
        a: Any = quantity_of(left)
        b: Any = quantity_of(right)
    else:
        a, b = semver_of(left), semver_of(right)
    return int(a > b) - int(a < b)


def is_quantity(text: str) -> bool:
    """``isQuantity()``."""
    try:
        parse_quantity_exact(text)
    except QuantityError:
        return False
    return True


def is_semver(text: str, normalize: bool = False) -> bool:
    """``isSemver()``."""
    try:
        semver_value(text, normalize)
    except ValueError:
        return False
    return True


def as_integer(value: Any) -> int:
    """``asInteger()``: the quantity as an int64.

    :raises ValueError: when it is not an integer that fits.
    """
    number = quantity_of(value)
    if number != number.to_integral_value() or not -(2**63) <= number < 2**63:
        raise ValueError("the quantity is not an integer that fits int64")
    return int(number)


def arithmetic(sign: int) -> Callable[[Any, Any], dict[str, str]]:
    """``add()`` (*sign* 1) or ``sub()`` (-1), of a quantity or an int."""

    def apply(left: Any, right: Any) -> dict[str, str]:
        amount = Decimal(right) if isinstance(right, int) else quantity_of(right)
        return {QUANTITY: canonical(quantity_of(left) + sign * amount)}

    return apply


def _is_greater(left: Any, right: Any) -> bool:
    return compare(left, right) > 0


def _is_less(left: Any, right: Any) -> bool:
    return compare(left, right) < 0


def _sign(value: Any) -> int:
    number = quantity_of(value)
    return int(number > 0) - int(number < 0)


def _is_integer(value: Any) -> bool:
    number = quantity_of(value)
    return number == number.to_integral_value()


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": quantity_value,
    "isQuantity": is_quantity,
    "semver": semver_value,
    "isSemver": is_semver,
    "compareTo": compare,
    "isGreaterThan": _is_greater,
    "isLessThan": _is_less,
    "major": lambda value: semver_of(value)[0],
    "minor": lambda value: semver_of(value)[1],
    "patch": lambda value: semver_of(value)[2],
    "sign": _sign,
    "isInteger": _is_integer,
    "asInteger": as_integer,
    "asApproximateFloat": lambda value: float(quantity_of(value)),
    "add": arithmetic(1),
    "sub": arithmetic(-1),
}
"""The libraries by name; members take their receiver first."""


def _index_of(text: str, sub: str, start: int = 0) -> int:
    if not 0 <= start <= len(text):
        raise IndexError(f"index out of range: {start}")
    return text.find(sub, start)


def _last_index_of(text: str, sub: str, start: int | None = None) -> int:
    if start is None:
        return text.rfind(sub)
    if not 0 <= start <= len(text):
        raise IndexError(f"index out of range: {start}")
    return text.rfind(sub, 0, start + len(sub))


def _replace(text: str, old: str, new: str, count: int = -1) -> str:
    return text.replace(old, new, count)


def _split(text: str, separator: str, count: int = -1) -> list[str]:
    if count == 0:
        return []
    return text.split(separator, count - 1 if count > 0 else -1)


def _substring(text: str, start: int, end: int | None = None) -> str:
    end = len(text) if end is None else end
    if not 0 <= start <= end <= len(text):
        raise IndexError(f"index out of range: {start}, {end}")
    return text[start:end]


def _char_at(text: str, index: int) -> str:
    if not 0 <= index <= len(text):
        raise IndexError(f"index out of range: {index}")
    return text[index : index + 1]


STRINGS: dict[str, Callable[..., Any]] = {
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda text: "".join(c.lower() if c.isascii() else c for c in text),
    "upperAscii": lambda text: "".join(c.upper() if c.isascii() else c for c in text),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": lambda text: text.strip(),
    "join": lambda items, separator="": separator.join(items),
}
"""The string extension (``ext.Strings``) Kubernetes enables, for an engine without it."""


def one_line(error: object) -> str:
    """An error as one line of at most 200 characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."
