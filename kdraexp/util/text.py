"""Text from outside made safe to log: control characters escaped, the whole clipped.

An API server's message, an object's name or a plugin's output can hold terminal escapes, line
breaks and megabytes; a log line must stay one line an operator can read.
"""

from __future__ import annotations

import re

LIMIT = 4096
"""Characters of one logged value or message, beyond which it is clipped."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str, limit: int = LIMIT) -> str:
    r"""*text* clipped to *limit* characters, its control characters escaped as ``\xNN``.

    Tabs and line breaks are kept: a traceback is logged below its line, not in it.
    """
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
