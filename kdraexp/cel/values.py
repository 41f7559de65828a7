"""CEL values of device fields, as the Kubernetes DRA environment gives them to selectors.

Quantities and versions are CEL maps with one key, the runtime having no opaque types:
``{QUANTITY: "<exact decimal>"}`` and ``{SEMVER: "<major.minor.patch[-pre]>"}``.  Equal values
have equal maps, so ``==`` means what it means in Kubernetes.  Pure Python: the exporter builds
these, the evaluation process (:mod:`kdraexp.cel.worker`) reads them.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from kdraexp.dra.quantity import parse_quantity_exact

QUANTITY = "kdraexp.quantity"
SEMVER = "kdraexp.semver"
ABSENT = ("absent",)
"""The value of a field the device does not have (never handed to CEL)."""


def quantity_value(text: str) -> dict[str, str]:
    """A CEL quantity.

    :raises QuantityError: when *text* is not one.
    """
    return {QUANTITY: canonical(parse_quantity_exact(text))}


def canonical(value: Decimal) -> str:
    """A decimal's one spelling (``1E+1`` for ten), so that equal quantities have equal maps."""
    return str(value.normalize()) if value else "0"


_SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)
_LOOSE_SEMVER = re.compile(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(.*)")


def semver_value(text: str, normalize: bool = False) -> dict[str, str]:
    """A CEL semver: strict SemVer 2.0, or with *normalize* a ``v``, missing parts, leading zeros.

    :raises ValueError: when *text* is not a version.
    """
    if normalize:
        loose = _LOOSE_SEMVER.fullmatch(text)
        if loose is not None:
            major, minor, patch, tail = loose.groups()
            text = f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{tail}"
    match = _SEMVER.fullmatch(text)
    if match is None:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch, pre = match.groups()
    return {SEMVER: f"{major}.{minor}.{patch}" + (f"-{pre}" if pre else "")}


def attribute_value(kind: str, value: Any) -> Any:
    """An attribute's wire value (``{"<kind>": value}``) as a CEL value; ABSENT if unreadable."""
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value if -(2**63) <= value < 2**63 else ABSENT  # an int64, as in Kubernetes
    if kind == "version" and isinstance(value, str):
        try:
            return semver_value(value)
        except ValueError:
            return ABSENT
    if kind in ("strings", "bools", "ints", "versions") and isinstance(value, list):
        items = [attribute_value(kind[:-1], item) for item in value]
        return ABSENT if any(item is ABSENT for item in items) else items
    return ABSENT
