"""The Kubernetes DRA CEL environment on Google's runtime: ``device`` and the libraries.

``device.driver``, ``device.attributes[domain].name``, ``device.capacity[domain].name`` as
quantities, ``device.allowMultipleAllocations``, the ``quantity()`` and ``semver()`` libraries
Kubernetes adds, and the string extension.  Imported by the evaluation process only
(:mod:`kdraexp.dra.celworker`): the exporter itself never loads the runtime.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from cel_expr_python import cel as _cel
from cel_expr_python.ext import ext_strings

from kdraexp.dra.celvalues import QUANTITY, SEMVER, canonical, quantity_value, semver_value
from kdraexp.dra.quantity import QuantityError, parse_quantity_exact


def _quantity_of(value: Any) -> Decimal:
    if isinstance(value, dict) and QUANTITY in value:
        return Decimal(value[QUANTITY])
    raise TypeError("expected a quantity")


def _semver_of(value: Any) -> tuple[int, int, int, tuple[Any, ...]]:
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


def _compare(left: Any, right: Any) -> int:
    if isinstance(left, dict) and QUANTITY in left:
        a: Any = _quantity_of(left)
        b: Any = _quantity_of(right)
    else:
        a, b = _semver_of(left), _semver_of(right)
    return int(a > b) - int(a < b)


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity_exact(text)
    except QuantityError:
        return False
    return True


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        semver_value(text, normalize)
    except ValueError:
        return False
    return True


def _as_integer(value: Any) -> int:
    number = _quantity_of(value)
    if number != number.to_integral_value() or not -(2**63) <= number < 2**63:
        raise ValueError("the quantity is not an integer that fits int64")
    return int(number)


def _arithmetic(sign: int) -> Callable[[Any, Any], dict[str, str]]:
    def apply(left: Any, right: Any) -> dict[str, str]:
        amount = Decimal(right) if isinstance(right, int) else _quantity_of(right)
        return {QUANTITY: canonical(_quantity_of(left) + sign * amount)}

    return apply


def _environment() -> Any:
    types = _cel.Type
    value = types.Map(types.STRING, types.DYN)

    def overload(name: str, result: Any, parameters: list[Any], impl: Any, member: bool) -> Any:
        return _cel.Overload(
            name, return_type=result, parameters=parameters, is_member=member, impl=impl
        )

    def function(name: str, *overloads: Any) -> Any:
        return _cel.FunctionDecl(name, list(overloads))

    s, b, i, d = types.STRING, types.BOOL, types.INT, types.DOUBLE
    functions = [
        function("quantity", overload("quantity_string", value, [s], quantity_value, False)),
        function("isQuantity", overload("isQuantity_string", b, [s], _is_quantity, False)),
        function(
            "semver",
            overload("semver_string", value, [s], semver_value, False),
            overload("semver_string_bool", value, [s, b], semver_value, False),
        ),
        function(
            "isSemver",
            overload("isSemver_string", b, [s], _is_semver, False),
            overload("isSemver_string_bool", b, [s, b], _is_semver, False),
        ),
        function("compareTo", overload("map_compareTo", i, [value, value], _compare, True)),
        function(
            "isGreaterThan",
            overload("map_isGreaterThan", b, [value, value], lambda x, y: _compare(x, y) > 0, True),
        ),
        function(
            "isLessThan",
            overload("map_isLessThan", b, [value, value], lambda x, y: _compare(x, y) < 0, True),
        ),
        function("major", overload("map_major", i, [value], lambda v: _semver_of(v)[0], True)),
        function("minor", overload("map_minor", i, [value], lambda v: _semver_of(v)[1], True)),
        function("patch", overload("map_patch", i, [value], lambda v: _semver_of(v)[2], True)),
        function(
            "sign",
            overload(
                "map_sign",
                i,
                [value],
                lambda v: (_quantity_of(v) > 0) - (_quantity_of(v) < 0),
                True,
            ),
        ),
        function(
            "isInteger",
            overload(
                "map_isInteger",
                b,
                [value],
                lambda v: _quantity_of(v) == _quantity_of(v).to_integral_value(),
                True,
            ),
        ),
        function("asInteger", overload("map_asInteger", i, [value], _as_integer, True)),
        function(
            "asApproximateFloat",
            overload("map_asApproximateFloat", d, [value], lambda v: float(_quantity_of(v)), True),
        ),
        function(
            "add",
            overload("map_add_map", value, [value, value], _arithmetic(1), True),
            overload("map_add_int", value, [value, i], _arithmetic(1), True),
        ),
        function(
            "sub",
            overload("map_sub_map", value, [value, value], _arithmetic(-1), True),
            overload("map_sub_int", value, [value, i], _arithmetic(-1), True),
        ),
    ]
    return _cel.NewEnv(
        variables={"device": value},
        functions=functions,
        extensions=[ext_strings.ExtStrings()],
    )


_ENVIRONMENT: Any = None


def compile_selector(expression: str) -> Any:
    """The compiled program.

    :raises Exception: whatever the runtime raises for an expression it refuses.
    """
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        _ENVIRONMENT = _environment()
    return _ENVIRONMENT.compile(expression)


def evaluate(program: Any, device: dict[str, Any]) -> bool | str:
    """Whether *device* satisfies *program*, or why that cannot be said."""
    try:
        result = program.eval(data={"device": device})
        value = result.value()
    except MemoryError:
        raise
    except Exception as error:  # anything the runtime or a library function raises
        return one_line(error)
    if isinstance(value, bool):
        return value
    return one_line(value) if result.type() == _cel.Type.ERROR else f"not a bool: {value!r}"


def one_line(error: object) -> str:
    """An error as one line of at most 200 characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."
