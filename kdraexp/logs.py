"""JSON log lines for containers: ``twistd --logger=kdraexp.logs.json_observer``."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from twisted.logger import (
    FileLogObserver,
    FilteringLogObserver,
    ILogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    formatEvent,
)

_FIELDS = ("resource", "error", "problem", "path", "listen", "origin", "version")


def format_json(event: dict[str, Any]) -> str:
    """One JSON object a line: time, level, logger, message and the event's named fields."""
    record: dict[str, Any] = {
        "time": datetime.fromtimestamp(event.get("log_time", 0), UTC).isoformat(),
        "level": getattr(event.get("log_level"), "name", "info"),
        "logger": event.get("log_namespace", ""),
        "msg": formatEvent(event),
    }
    for field in _FIELDS:
        if field in event:
            record[field] = str(event[field])
    failure = event.get("log_failure")
    if failure is not None:
        record["traceback"] = failure.getTraceback()
    return json.dumps(record, ensure_ascii=False) + "\n"


def json_observer() -> ILogObserver:
    """The observer for ``twistd --logger``: JSON lines on standard output, info and above."""
    return FilteringLogObserver(
        FileLogObserver(sys.stdout, format_json),
        [LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)],
    )
