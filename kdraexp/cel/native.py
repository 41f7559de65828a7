"""Selectors evaluated here, without the CEL process: a driver and attributes against literals.

Most DeviceClasses select on the driver and an attribute or two
(``device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'``).
An expression that is only clauses joined by ``&&``, each comparing ``device.driver`` with a
plain string, or ``device.attributes['<domain>'].<name>`` (or ``['<name>']``) with a plain
string, a decimal int or ``true``/``false``, by ``==`` or ``!=``, is evaluated here, the way
CEL evaluates it, wherever the answer is certain.  Where it is not (an attribute the device
lacks is an error in CEL; one of another type than the literal is a question of CEL's
overloads), the answer is None and the CEL process is asked, as for any other expression.  A
clause that is False makes the expression False whatever the others give: CEL's ``&&`` is
False when either side is, errors included.  Such an expression needs no compiling either (it
type-checks in the Kubernetes environment), so a cluster whose classes all read so never starts
the process.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import attrs

from kdraexp.cel.tokens import literal, tokens
from kdraexp.cel.values import ABSENT

_INT = re.compile(r"0|[1-9][0-9]*")
_RESERVED = frozenset(
    {
        *("as", "break", "const", "continue", "else", "false", "for", "function", "if"),
        *("import", "in", "let", "loop", "package", "namespace", "null", "return", "true"),
        *("var", "void", "while"),
    }
)
"""Names CEL reserves: ``device.attributes['d'].in`` does not compile, so it is not read here."""
_EQUAL = ("other", "==")
_UNEQUAL = ("other", "!=")
_AND = ("other", "&&")
DRIVER = ("driver",)


class Attributes(Protocol):
    """What of a device the clauses read (see :class:`kdraexp.cel.matching.DeviceFields`)."""

    driver: str

    def attribute(self, domain: str, name: str) -> Any:
        """The attribute's CEL value, or ABSENT."""


@attrs.frozen
class Clause:
    """``<path> == <literal>`` (or ``!=``): path ``("driver",)`` or ``("attributes", d, n)``."""

    path: tuple[str, ...]
    literal: str | int | bool
    equal: bool


@attrs.frozen
class Native:
    """An expression of that form: its clauses, all of which must hold."""

    clauses: tuple[Clause, ...]

    def __call__(self, device: Attributes) -> bool | None:
        """The expression's answer for *device*; None where CEL must say."""
        certain = True
        for clause in self.clauses:
            path = clause.path
            value = device.driver if path is DRIVER else device.attribute(path[1], path[2])
            if value is ABSENT or type(value) is not type(clause.literal):
                certain = False
            elif (value == clause.literal) is not clause.equal:
                return False
        return True if certain else None


def native(expression: str, found: list[tuple[str, str]] | None = None) -> Native | None:
    """The expression as :class:`Native` clauses; None when it is not of that form.

    *found*: its tokens, where they were read already (a long expression takes a while).
    """
    found = tokens(expression) if found is None else found
    clauses: list[Clause] = []
    at = 0
    while True:
        clause, at = _clause(found, at)
        if clause is None:
            return None
        clauses.append(clause)
        if at == len(found):
            return Native(tuple(clauses))
        if found[at] != _AND:
            return None
        at += 1


def _clause(found: list[tuple[str, str]], at: int) -> tuple[Clause | None, int]:
    """A clause from *at*, and where it ends."""
    path, after = _path(found, at)
    if path is not None:
        equal, after = _operator(found, after)
        value, end = _value(found, after)
    else:
        value, after = _value(found, at)
        equal, after = _operator(found, after)
        path, end = _path(found, after)
    if path is None or equal is None or value is None:
        return None, at
    if path == DRIVER and not isinstance(value, str):
        return None, at  # a driver compared with another type does not compile
    return Clause(DRIVER if path == DRIVER else path, value, equal), end


def _path(found: list[tuple[str, str]], at: int) -> tuple[tuple[str, ...] | None, int]:
    """``device.driver`` or ``device.attributes['<domain>'].<name>`` from *at*."""
    head = found[at : at + 3]
    if head == [("ident", "device"), ("other", "."), ("ident", "driver")]:
        return DRIVER, at + 3
    if head != [("ident", "device"), ("other", "."), ("ident", "attributes")]:
        return None, at
    domain = literal(found[at + 4]) if len(found) > at + 5 else None
    if found[at + 3 : at + 4] != [("other", "[")] or domain is None:
        return None, at
    if found[at + 5] != ("other", "]"):
        return None, at
    rest = found[at + 6 : at + 9]
    if len(rest) >= 2 and rest[0] == ("other", ".") and rest[1][0] == "ident":
        if rest[1][1] in _RESERVED:
            return None, at
        return ("attributes", domain, rest[1][1]), at + 8
    if len(rest) == 3 and rest[0] == ("other", "[") and rest[2] == ("other", "]"):
        name = literal(rest[1])
        if name is not None:
            return ("attributes", domain, name), at + 9
    return None, at


def _operator(found: list[tuple[str, str]], at: int) -> tuple[bool | None, int]:
    operator = found[at] if at < len(found) else None
    if operator == _EQUAL:
        return True, at + 1
    if operator == _UNEQUAL:
        return False, at + 1
    return None, at


def _value(found: list[tuple[str, str]], at: int) -> tuple[str | int | bool | None, int]:
    """A plain string, a decimal int64 or a bool literal at *at*."""
    if at >= len(found):
        return None, at
    kind, text = found[at]
    if kind == "string":
        return literal(found[at]), at + 1
    if kind == "number" and _INT.fullmatch(text) and int(text) < 2**63:
        return int(text), at + 1
    if kind == "ident" and text in ("true", "false"):
        return text == "true", at + 1
    return None, at
