"""Which devices a DeviceClass selects: its CEL selectors, evaluated as Kubernetes evaluates them.

Only claims name a DeviceClass; devices do not.  To say how many devices of a class are free, each
class's ``spec.selectors[].cel.expression`` is evaluated against each device with Google's CEL
runtime (cel-expr-python, chosen by measurement: see docs/metrics.md) in the Kubernetes DRA
environment: ``device.driver``, ``device.attributes[domain].name``, ``device.capacity[domain].name``
as quantities, ``device.allowMultipleAllocations``, and the ``quantity()`` and ``semver()``
libraries Kubernetes adds.

Evaluations are cached by what they read.  Each expression is scanned for the device fields it
reads (``device.attributes['gpu.nvidia.com'].type``...); a device's *projection* is the values of
those fields, and devices with the same projection give the same answer (CEL is pure), so a
cluster of 64,000 GPUs of three types costs a handful of evaluations.  An expression that uses
``device`` in a way the scan cannot follow reads the whole device.

An expression that cannot be compiled or evaluated matches nothing; the collection counts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable
from decimal import Decimal
from typing import Any, Protocol

import attrs

from kdraexp.dra.quantity import QuantityError, parse_quantity_exact

try:
    from cel_expr_python import cel as _cel
    from cel_expr_python.ext import ext_strings
except ImportError:  # no wheel for this platform (cel-expr-python ships x86_64 and aarch64)
    _cel = None

AVAILABLE = _cel is not None
"""Whether this platform can evaluate selectors (the image's ppc64le, s390x, riscv64 cannot)."""

QUANTITY = "kdraexp.quantity"
SEMVER = "kdraexp.semver"
"""Quantities and versions are CEL maps with one of these keys, the runtime having no opaque
types: ``{QUANTITY: "<exact decimal>"}`` and ``{SEMVER: "<major.minor.patch[-pre]>"}``.  Equal
values have equal maps, so ``==`` means what it means in Kubernetes."""

ABSENT = ("absent",)
"""The projection of a field the device does not have."""

CACHE_LIMIT = 8192
"""Cached answers per class; when full, the cache starts over (whole-device reads never repeat)."""


class DeviceFields(Protocol):
    """What a device offers to selectors, in CEL values (see :func:`attribute_value`)."""

    driver: str
    allow_multiple_allocations: bool

    def attribute(self, domain: str, name: str) -> Any:
        """The attribute's CEL value, or ABSENT."""

    def capacity(self, domain: str, name: str) -> Any:
        """The capacity as a CEL quantity, or ABSENT."""

    def attribute_domain(self, domain: str) -> dict[str, Any]:
        """Every attribute of *domain*."""

    def capacity_domain(self, domain: str) -> dict[str, Any]:
        """Every capacity of *domain*."""

    def domains(self) -> Iterable[str]:
        """Every domain of the device's attributes and capacities."""

    def projection(self, path: Path) -> Hashable:
        """What identifies the value at *path*: equal for equal values (undecoded JSON will do)."""


# --- Reading what an expression reads --------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
    | (?P<string>[rRbB]{0,2}
        (?:'''(?:.|\n)*?'''|\"\"\"(?:.|\n)*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>[0-9][0-9A-Za-z.]*)
    | (?P<other>.)
    """,
    re.VERBOSE,
)
_SIMPLE_STRING = re.compile(r"""'([^'\\]*)'|"([^"\\]*)\"""")

Path = tuple[str, ...]
"""``("driver",)``, ``("attributes", domain)`` or ``("attributes", domain, name)`` (or capacity)."""


def _tokens(expression: str) -> list[tuple[str, str]]:
    found = []
    for match in _TOKEN.finditer(expression):
        kind = match.lastgroup or "other"
        if kind != "space":
            found.append((kind, match.group()))
    return found


def _literal(token: tuple[str, str]) -> str | None:
    """The text of a plain string literal; None for raw, bytes, escaped or other tokens."""
    kind, text = token
    if kind != "string":
        return None
    match = _SIMPLE_STRING.fullmatch(text)
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)


def device_paths(expression: str) -> tuple[Path, ...] | None:
    """The device fields *expression* reads, or None when it reads the device some other way.

    Every use of the variable ``device`` must be one of ``device.driver``,
    ``device.allowMultipleAllocations``, ``device.attributes['<domain>']`` or
    ``device.capacity['<domain>']``, optionally followed by ``.<name>`` or ``['<name>']``.
    """
    tokens = _tokens(expression)
    paths: list[Path] = []
    for index, token in enumerate(tokens):
        if token != ("ident", "device") or (index and tokens[index - 1][1] == "."):
            continue
        rest = tokens[index + 1 : index + 9] + [("end", "")] * 8
        if rest[0][1] != "." or rest[1][0] != "ident":
            return None
        field = rest[1][1]
        if field in ("driver", "allowMultipleAllocations"):
            paths.append((field,))
            continue
        domain = _literal(rest[3])
        if field not in ("attributes", "capacity") or rest[2][1] != "[" or domain is None:
            return None
        if rest[4][1] != "]":
            return None
        name = None
        if rest[5][1] == "." and rest[6][0] == "ident" and rest[7][1] != "(":
            name = rest[6][1]
        elif rest[5][1] == "[" and _literal(rest[6]) is not None and rest[7][1] == "]":
            name = _literal(rest[6])
        paths.append((field, domain) if name is None else (field, domain, name))
    return tuple(dict.fromkeys(paths))


def string_literals(expression: str) -> list[str]:
    """Every plain string literal (domains looked up in a device the scan cannot follow)."""
    return [text for text in map(_literal, _tokens(expression)) if text is not None]


# --- Values ----------------------------------------------------------------------------------


def quantity_value(text: str) -> dict[str, str]:
    """A CEL quantity.

    :raises QuantityError: when *text* is not one.
    """
    return {QUANTITY: _canonical(parse_quantity_exact(text))}


def _canonical(value: Decimal) -> str:
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
        return value
    if kind == "version" and isinstance(value, str):
        try:
            return semver_value(value)
        except ValueError:
            return ABSENT
    if kind in ("strings", "bools", "ints", "versions") and isinstance(value, list):
        items = [attribute_value(kind[:-1], item) for item in value]
        return ABSENT if any(item is ABSENT for item in items) else items
    return ABSENT


def _key(value: Any) -> Any:
    """A hashable stand-in for a CEL value, distinguishing types (1, 1.0 and True differ)."""
    if isinstance(value, dict):
        return ("map", tuple(sorted((k, _key(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(_key(item) for item in value))
    if value is ABSENT:
        return ABSENT
    return (type(value).__name__, value)


# --- The Kubernetes CEL libraries ------------------------------------------------------------


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
        return {QUANTITY: _canonical(_quantity_of(left) + sign * amount)}

    return apply


def _environment() -> Any:
    assert _cel is not None
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


# --- Matching --------------------------------------------------------------------------------


@attrs.frozen
class Selector:
    """One compiled expression and the device fields it reads (None: the whole device)."""

    program: Any
    paths: tuple[Path, ...] | None
    literals: tuple[str, ...]


@attrs.frozen
class CompiledClass:
    """A class's selectors, compiled; *error* says why it cannot be evaluated, if it cannot."""

    selectors: tuple[Selector, ...] = ()
    error: str | None = None


class Matcher:
    """Evaluates DeviceClass selectors; lives as long as the exporter, so its caches do too."""

    def __init__(self) -> None:
        self._environment: Any = None
        self._compiled: dict[tuple[str, ...], CompiledClass] = {}
        self._answers: dict[tuple[str, ...], dict[Any, bool | str]] = {}

    def compile(self, expressions: tuple[str, ...]) -> CompiledClass:
        """Compile a class's selector expressions (cached by their text)."""
        compiled = self._compiled.get(expressions)
        if compiled is None:
            compiled = self._compiled[expressions] = self._compile(expressions)
        return compiled

    def _compile(self, expressions: tuple[str, ...]) -> CompiledClass:
        if _cel is None:
            return CompiledClass(error="CEL is not available on this platform")
        if self._environment is None:
            self._environment = _environment()
        selectors = []
        for index, expression in enumerate(expressions):
            try:
                program = self._environment.compile(expression)
            except Exception as error:  # the runtime raises RuntimeError subclasses and others
                return CompiledClass(error=f"selector {index}: {_one_line(error)}")
            selectors.append(
                Selector(program, device_paths(expression), tuple(string_literals(expression)))
            )
        return CompiledClass(tuple(selectors))

    def forget(self, keep: Iterable[tuple[str, ...]]) -> None:
        """Drop what was cached for classes that no longer exist."""
        kept = set(keep)
        for cache in (self._compiled, self._answers):
            for expressions in [key for key in cache if key not in kept]:
                del cache[expressions]

    def matches(
        self, expressions: tuple[str, ...], compiled: CompiledClass, device: DeviceFields
    ) -> bool | str:
        """Whether *device* satisfies every selector, or why that cannot be said."""
        if compiled.error is not None:
            return compiled.error
        answers = self._answers.setdefault(expressions, {})
        for index, selector in enumerate(compiled.selectors):
            key = (index, _projection(selector, device))
            answer = answers.get(key)
            if answer is None:
                if len(answers) >= CACHE_LIMIT:
                    answers.clear()
                answer = answers[key] = _evaluate(selector, device)
            if answer is not True:
                return answer
        return True


def _projection(selector: Selector, device: DeviceFields) -> Any:
    if selector.paths is None:
        return ("device", _key(_whole(device, selector.literals)))
    return tuple([device.projection(path) for path in selector.paths])


def union_paths(compiled: Iterable[CompiledClass]) -> tuple[Path, ...] | None:
    """Every path the classes' selectors read, or None when one reads the whole device."""
    paths: dict[Path, None] = {}
    for one in compiled:
        for selector in one.selectors:
            if selector.paths is None:
                return None
            paths.update(dict.fromkeys(selector.paths))
    return tuple(paths)


def _read(device: DeviceFields, path: Path) -> Any:
    if path == ("driver",):
        return device.driver
    if path == ("allowMultipleAllocations",):
        return device.allow_multiple_allocations
    field, domain = path[0], path[1]
    if len(path) == 2:
        return (
            device.attribute_domain(domain)
            if field == "attributes"
            else device.capacity_domain(domain)
        )
    if field == "attributes":
        return device.attribute(domain, path[2])
    return device.capacity(domain, path[2])


def _whole(device: DeviceFields, literals: tuple[str, ...]) -> dict[str, Any]:
    # An unknown domain reads as an empty map in Kubernetes; string literals stand in for the
    # domains the expression may look up.
    domains = [*device.domains(), *literals]
    return {
        "driver": device.driver,
        "allowMultipleAllocations": device.allow_multiple_allocations,
        "attributes": {domain: device.attribute_domain(domain) for domain in domains},
        "capacity": {domain: device.capacity_domain(domain) for domain in domains},
    }


def _context(selector: Selector, device: DeviceFields) -> dict[str, Any]:
    if selector.paths is None:
        return _whole(device, selector.literals)
    context: dict[str, Any] = {
        "driver": device.driver,
        "allowMultipleAllocations": device.allow_multiple_allocations,
        "attributes": {},
        "capacity": {},
    }
    for path in selector.paths:
        if len(path) < 2:
            continue
        maps = context[path[0]]
        if len(path) == 2:
            maps[path[1]] = dict(_read(device, path))
            continue
        domain = maps.setdefault(path[1], {})
        value = _read(device, path)
        if value is not ABSENT:
            domain[path[2]] = value
    return context


def _evaluate(selector: Selector, device: DeviceFields) -> bool | str:
    try:
        result = selector.program.eval(data={"device": _context(selector, device)})
        value = result.value()
    except Exception as error:  # anything the runtime or a library function raises
        return _one_line(error)
    if isinstance(value, bool):
        return value
    return _one_line(value) if result.type() == _cel.Type.ERROR else f"not a bool: {value!r}"


def _one_line(error: object) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 200 else text[:197] + "..."
