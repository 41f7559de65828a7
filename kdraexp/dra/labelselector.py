"""Label selectors (``a=b,c in (d,e),!f,g>5``) read as ``kubectl -l`` and the API server read them.

A port of ``k8s.io/apimachinery/pkg/labels``' ``Parse``: its lexer (a token is the longest
operator, or a run of anything but whitespace and ``=!(),<>``), its parser (``in`` and ``notin``
are values inside parentheses and after an operator, ``()`` is the empty value, a key alone is
``exists``), and its checks of each requirement (keys and values as labels take them; ``in`` and
``notin`` with values; ``>`` and ``<`` with one integer).  What it refuses is refused here, with
its words; nothing it refuses matches a node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from kdraexp.dra.nodeselector import Requirement, int64

_SPECIAL = frozenset("=!(),><")
"""Each an operator alone; ``==`` and ``!=`` are the longer ones (``in``, ``notin``: words)."""
_WHITESPACE = frozenset(" \t\r\n")
_KEYWORDS = frozenset({"in", "notin"})
_END = ("end", "")
_BINARY = {"in": "In", "notin": "NotIn", "=": "In", "==": "In", "!=": "NotIn", ">": "Gt", "<": "Lt"}
"""Each operator after a key, as a requirement says it (``=`` is ``in`` one value)."""
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)


@attrs.frozen
class LabelSelector:
    """A label selector, read: every requirement holds; none, every node."""

    requirements: tuple[Requirement, ...]
    text: str

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether a node *name* with *labels* is one it selects."""
        return all(requirement.holds(name, labels) for requirement in self.requirements)


def label_selector(text: str) -> LabelSelector:
    """The selector *text* says, as ``labels.Parse`` reads it.

    :raises ValueError: saying, in one line, what ``labels.Parse`` refuses in it.
    """
    tokens = _tokens(text)
    at = 0
    requirements = []
    while True:
        kind, literal = _as_value(tokens[at])
        if kind == "end":
            break
        if kind not in ("word", "!"):
            raise ValueError(f"found '{literal}', expected: !, identifier, or 'end of string'")
        try:
            requirement, at = _requirement(tokens, at)
        except ValueError as error:
            raise ValueError(f"unable to parse requirement: {error}") from None
        requirements.append(requirement)
        kind, literal = _as_value(tokens[at])
        at += 1
        if kind == "end":
            break
        if kind != ",":
            raise ValueError(f"found '{literal}', expected: ',' or 'end of string'")
        following, literal = _as_value(tokens[at])
        if following not in ("word", "!"):
            raise ValueError(f"found '{literal}', expected: identifier after ','")
    requirements.sort(key=lambda requirement: requirement.key)
    return LabelSelector(tuple(requirements), text.strip())


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, literal) for each token of *text*, then the end.

    Kind is the operator, ``in``, ``notin``, or ``word`` for an identifier.
    """
    found = []
    at, end = 0, len(text)
    while True:
        while at < end and text[at] in _WHITESPACE:
            at += 1
        if at == end:
            found.append(_END)
            return found
        start = at
        if text[at] in _SPECIAL:  # the longest operator
            two = text[at : at + 2]
            operator = two if two in ("==", "!=") else text[at]
            found.append((operator, operator))
            at += len(operator)
            continue
        while at < end and text[at] not in _SPECIAL and text[at] not in _WHITESPACE:
            at += 1
        word = text[start:at]
        found.append((word if word in _KEYWORDS else "word", word))


def _as_value(token: tuple[str, str]) -> tuple[str, str]:
    """Where a value may be, ``in`` and ``notin`` are identifiers."""
    return ("word", token[1]) if token[0] in _KEYWORDS else token


def _requirement(tokens: list[tuple[str, str]], at: int) -> tuple[Requirement, int]:
    """The requirement starting at *at*, and where the token after it is."""
    kind, key = _as_value(tokens[at])
    at += 1
    absent = kind == "!"
    if absent:
        kind, key = _as_value(tokens[at])
        at += 1
    if kind != "word":
        raise ValueError(f"found '{key}', expected: identifier")
    _check_key(key)
    if absent or _as_value(tokens[at])[0] in ("end", ","):
        return _made(key, "DoesNotExist" if absent else "Exists", ()), at
    kind, literal = tokens[at]
    at += 1
    operator = _BINARY.get(kind)
    if operator is None:
        raise ValueError(f"found '{literal}', expected: in, notin, =, ==, !=, gt, lt")
    if kind in ("in", "notin"):
        values, at = _set(tokens, at)
    else:
        values, at = _exact(tokens, at)
    return _made(key, operator, values), at


def _set(tokens: list[tuple[str, str]], at: int) -> tuple[tuple[str, ...], int]:
    """``(a,b)``: its values (``()``, ``(a,)`` and ``(,a)`` hold the empty one)."""
    kind, literal = _as_value(tokens[at])
    at += 1
    if kind != "(":
        raise ValueError(f"found '{literal}' expected: '('")
    kind, literal = _as_value(tokens[at])
    if kind == ")":
        return ("",), at + 1
    if kind not in ("word", ","):
        raise ValueError(f"found '{literal}', expected: ',', ')' or identifier")
    values: set[str] = set()
    while True:
        kind, literal = _as_value(tokens[at])
        at += 1
        if kind not in ("word", ","):
            raise ValueError(f"found '{literal}', expected: ',', or identifier")
        following, after = _as_value(tokens[at])
        if kind == "word":
            values.add(literal)
            if following == ")":
                break
            if following != ",":
                raise ValueError(f"found '{after}', expected: ',' or ')'")
        else:
            if not values or following in (",", ")"):
                values.add("")
            if following == ")":
                break
    return tuple(sorted(values)), at + 1


def _exact(tokens: list[tuple[str, str]], at: int) -> tuple[tuple[str, ...], int]:
    """The one value after ``=``, ``==``, ``!=``, ``>`` or ``<`` (none: the empty one)."""
    kind, literal = _as_value(tokens[at])
    if kind in ("end", ","):
        return ("",), at
    if kind != "word":
        raise ValueError(f"found '{literal}', expected: identifier")
    return (literal,), at + 1


def _made(key: str, operator: str, values: tuple[str, ...]) -> Requirement:
    """``NewRequirement``: its checks of the values, then the requirement."""
    if operator in ("Gt", "Lt") and int64(values[0]) is None:
        raise ValueError(
            f"values[0]: Invalid value: {values[0]!r}: for 'Gt', 'Lt' operators, the value "
            "must be an integer"
        )
    for index, value in enumerate(values):
        problem = _value_problem(value)
        if problem:
            raise ValueError(f"values[{index}][{key}]: Invalid value: {value!r}: {problem}")
    return Requirement(key, operator, values)


def _check_key(key: str) -> None:
    """``IsLabelKey``: an optional DNS subdomain and ``/``, then a name of 63 bytes at most."""
    problems = []
    parts = key.split("/")
    if len(parts) > 2:
        problems.append(f"a valid label key {_NAME_RULE}, with an optional DNS subdomain prefix")
    else:
        if len(parts) == 2:
            prefix = parts[0]
            if not prefix:
                problems.append("prefix part must be non-empty")
            elif len(prefix.encode()) > 253:
                problems.append("prefix part must be no more than 253 bytes")
            elif not _SUBDOMAIN.fullmatch(prefix):
                problems.append("prefix part a lowercase RFC 1123 subdomain")
        name = parts[-1]
        if not name:
            problems.append("name part must be non-empty")
        elif len(name.encode()) > 63:
            problems.append("name part must be no more than 63 bytes")
        if not _NAME.fullmatch(name):
            problems.append(f"name part {_NAME_RULE}")
    if problems:
        raise ValueError(f"key: Invalid value: {key!r}: {'; '.join(problems)}")


def _value_problem(value: str) -> str:
    """``IsValidLabelValue``: empty, or a name of 63 bytes at most; "" when it is one."""
    problems = []
    if len(value.encode()) > 63:
        problems.append("must be no more than 63 bytes")
    if value and not _NAME.fullmatch(value):
        problems.append(
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return "; ".join(problems)
