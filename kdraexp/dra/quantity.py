"""Kubernetes ``resource.Quantity`` strings to floats.

The grammar and the rounding follow ``k8s.io/apimachinery/pkg/api/resource``: a sign, digits with
an optional fraction, then a binary suffix (Ki..Ei), a decimal suffix (n, u, m, k, M, G, T, P, E)
or a decimal exponent (``e3``, ``E-2``).  Non-zero magnitudes below one nano are rounded up to 1n,
and binary-suffixed values are capped at the largest int64, as Kubernetes does.  The float is the
one nearest to the exact decimal value, so ``1.1`` is 1.1 (Go's approximation says
1.1000000000000001).
"""

from __future__ import annotations

import functools
import math
import re
from decimal import ROUND_UP, Decimal, localcontext

_GRAMMAR = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exp>[+-]?[0-9]+))?",
    re.ASCII,
)
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_NANO = Decimal("1e-9")
_INT64_MAX = Decimal(2**63 - 1)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> float:
    """Return the value of the Kubernetes quantity *text* as a float.

    Cached: a cluster publishes the same few capacity strings thousands of times.

    :raises QuantityError: if *text* is not a quantity, or is beyond the range of a float.
    """
    value = float(parse_quantity_exact(text))
    if math.isinf(value):
        raise QuantityError(f"quantity out of range: {text!r}")
    return value


@functools.lru_cache(maxsize=1024)
def parse_quantity_exact(text: str) -> Decimal:
    """Return the exact value of the Kubernetes quantity *text*, rounded as Kubernetes rounds it.

    :raises QuantityError: if *text* is not a quantity.
    """
    match = _GRAMMAR.fullmatch(text)
    if match is None or not (match["int"] or match["frac"]):
        raise QuantityError(f"not a Kubernetes quantity: {text!r}")
    digits = f"{match['int'] or '0'}.{match['frac'] or '0'}"
    suffix = match["suffix"] or ""
    exponent = match["exp"]
    with localcontext() as ctx:
        ctx.prec, ctx.Emax, ctx.Emin = 1000, 10**7, -(10**7)
        if exponent is not None:
            if len(exponent.lstrip("+-")) > 6:
                raise QuantityError(f"exponent out of range in quantity: {text!r}")
            magnitude = Decimal(digits).scaleb(int(exponent))
        elif suffix in _BINARY:
            magnitude = Decimal(digits) * (2 ** _BINARY[suffix])
        else:
            magnitude = Decimal(digits).scaleb(_DECIMAL[suffix])
        if magnitude and int(magnitude.as_tuple().exponent) < -9:
            magnitude = magnitude.quantize(_NANO, rounding=ROUND_UP)
        if suffix in _BINARY and magnitude > _INT64_MAX:
            magnitude = _INT64_MAX
        return -magnitude if match["sign"] == "-" else magnitude
