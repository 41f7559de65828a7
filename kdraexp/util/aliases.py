"""How much a parsed YAML document holds once its aliases are followed.

PyYAML builds an alias as a second reference to the same object, so a "billion laughs" file of
a few hundred bytes parses at once and cheaply; it is whatever walks the result afterwards (a
merge, a copy, a check of every value) that meets its billions. Counting with a budget first
bounds that walk.
"""

from __future__ import annotations

from typing import Any


def expands_past(document: Any, budget: int) -> bool:
    """Whether following every alias, *document* holds more than *budget* values."""
    stack: list[Any] = [document]
    while stack:
        value = stack.pop()
        budget -= 1
        if budget < 0:
            return True
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False
