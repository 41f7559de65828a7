"""An expression's tokens, as far as reading which device fields it uses needs them.

Not a CEL parser: enough to find ``device.<field>...`` chains and plain string literals.  What
it reads as one token CEL reads as one: ``==``, ``!=``, ``&&`` and ``||`` are single tokens, so
``= =`` is two ``=``, which CEL refuses; and only CEL's own spaces (space, tab, line feed, form
feed, carriage return) separate tokens, so a no-break space is no space.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""
    (?P<space>[\ \t\n\f\r]+|//[^\n]*)
    | (?P<string>[rRbB]{0,2}
        (?:'''(?:.|\n)*?'''|\"\"\"(?:.|\n)*?\"\"\"|'(?:\\.|[^'\\\n\r])*'|"(?:\\.|[^"\\\n\r])*"))
    | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<number>[0-9][0-9A-Za-z.]*)
    | (?P<other>==|!=|&&|\|\||<=|>=|.)
    """,
    re.VERBOSE,
)
_SIMPLE_STRING = re.compile(r"""'([^'\\\n\r]*)'|"([^"\\\n\r]*)\"""")


def tokens(expression: str) -> list[tuple[str, str]]:
    """The expression's tokens as (kind, text), spaces and comments left out."""
    return [(kind, text) for kind, text, _ in located(expression)]


def located(expression: str) -> list[tuple[str, str, int]]:
    """The expression's tokens as (kind, text, where it starts), spaces and comments left out."""
    found = []
    for match in _TOKEN.finditer(expression):
        kind = match.lastgroup or "other"
        if kind != "space":
            found.append((kind, match.group(), match.start()))
    return found


def literal(token: tuple[str, str]) -> str | None:
    """The text of a plain string literal; None for raw, bytes, escaped or other tokens."""
    kind, text = token
    if kind != "string":
        return None
    match = _SIMPLE_STRING.fullmatch(text)
    if match is None:
        return None
    return match.group(1) if match.group(1) is not None else match.group(2)
