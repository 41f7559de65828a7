"""Log lines: text for a terminal, JSON for containers, at the level the operator chose.

Twisted's own chatter (factories starting and stopping, ports closed, signals received) is
debug-level news to an operator: below warnings, only the exporter's own lines are shown
unless ``--log-level debug`` asks for everything.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

from twisted.logger import (
    FileLogObserver,
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogLevel,
    PredicateResult,
    formatEvent,
)
from zope.interface import implementer

from kdraexp.util.text import printable

NO: PredicateResult = PredicateResult.no
MAYBE: PredicateResult = PredicateResult.maybe
LEVELS = ("debug", "info", "warn", "error", "critical")
FORMATS = ("text", "json")
_FIELDS = ("resource", "error", "problem", "path", "listen", "origin", "version", "where")


def format_json(event: dict[str, Any]) -> str:
    """One JSON object a line: time, level, logger, message and the event's named fields."""
    record: dict[str, Any] = {
        "time": datetime.fromtimestamp(event.get("log_time", 0), UTC).isoformat(),
        "level": getattr(event.get("log_level"), "name", "info"),
        "logger": event.get("log_namespace", ""),
        "msg": printable(formatEvent(event)),
    }
    for field in _FIELDS:
        if field in event:
            record[field] = printable(str(event[field]))
    failure = event.get("log_failure")
    if failure is not None:
        record["traceback"] = failure.getTraceback()
    return json.dumps(record, ensure_ascii=False) + "\n"


def format_text(event: dict[str, Any]) -> str:
    """``time level [logger] message``, and the traceback of a logged failure below it."""
    when = datetime.fromtimestamp(event.get("log_time", 0), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    level = getattr(event.get("log_level"), "name", "info")
    message = printable(formatEvent(event)).replace("\n", "\\n")  # one line, whatever it quotes
    line = f"{when} {level:<5} [{event.get('log_namespace', '')}] {message}\n"
    failure = event.get("log_failure")
    if failure is not None:
        line += failure.getTraceback()
    return line


@implementer(ILogFilterPredicate)
class _Quiet:
    """Drops what is below *level*, and Twisted's lines below warnings unless *level* is debug."""

    def __init__(self, level: LogLevel) -> None:
        self._level = level

    def __call__(self, event: dict[str, Any]) -> PredicateResult:
        level = event.get("log_level", LogLevel.info)
        if level < self._level:
            return NO
        if self._level > LogLevel.debug and level < LogLevel.warn:
            namespace = str(event.get("log_namespace", ""))
            if not namespace.startswith("kdraexp"):
                return NO
        return MAYBE


def observer(level: str = "info", format: str = "json", out: IO[str] | None = None) -> ILogObserver:
    """Lines of *format* (``text`` or ``json``) on *out* (standard output), *level* and above."""
    formatter: Callable[[dict[str, Any]], str] = format_json if format == "json" else format_text
    return FilteringLogObserver(
        FileLogObserver(out or sys.stdout, formatter),
        [_Quiet(LogLevel.levelWithName(level))],
    )


def json_observer() -> ILogObserver:
    """The observer for ``twistd --logger=kdraexp.app.logs.json_observer``: JSON lines, info up."""
    return observer("info", "json")
