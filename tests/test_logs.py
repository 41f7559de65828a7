"""JSON log lines for containers."""

from __future__ import annotations

import io
import json

from twisted.logger import Logger, LogLevel, globalLogPublisher

from kdraexp.app import logs
from kdraexp.dra.listing import ListError


def test_json_lines(monkeypatch: object) -> None:
    """One JSON object a line with time, level, logger, message and the named fields."""
    out = io.StringIO()
    import sys

    monkeypatch.setattr(sys, "stdout", out)  # type: ignore[attr-defined]
    observer = logs.json_observer()
    globalLogPublisher.addObserver(observer)
    try:
        log = Logger(namespace="kdraexp.sources.gather")
        error = ListError("resourceclaims", "Forbidden", 403, 'cannot list "x"')
        log.error("Error listing {resource}: {error}", resource="resourceclaims", error=str(error))
        log.debug("not shown")
    finally:
        globalLogPublisher.removeObserver(observer)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["level"] == "error"
    assert record["logger"] == "kdraexp.sources.gather"
    assert record["resource"] == "resourceclaims"
    assert record["msg"] == (
        'Error listing resourceclaims: list resourceclaims: 403 Forbidden: cannot list "x"'
    )
    assert record["time"].endswith("+00:00")


def test_failure_traceback() -> None:
    """A logged failure carries its traceback in one field, still one line."""
    from twisted.python.failure import Failure

    try:
        raise ValueError("boom")
    except ValueError:
        failure = Failure()
    line = logs.format_json(
        {
            "log_format": "oops",
            "log_level": LogLevel.critical,
            "log_failure": failure,
            "log_namespace": "x",
            "log_time": 0,
        }
    )
    assert line.count("\n") == 1
    assert "ValueError: boom" in json.loads(line)["traceback"]


def test_levels_and_twisted_chatter() -> None:
    """At info, the exporter's info lines pass and Twisted's do not; at debug, all pass."""
    import io

    def lines(level: str) -> list[str]:
        out = io.StringIO()
        observer = logs.observer(level, "text", out)
        for namespace, event_level in (
            ("kdraexp.app.service", LogLevel.info),
            ("twisted.internet.base", LogLevel.info),
            ("twisted.internet.defer", LogLevel.critical),
            ("kdraexp.sources.gather", LogLevel.debug),
        ):
            observer(
                {
                    "log_format": f"{namespace} {event_level.name}",
                    "log_level": event_level,
                    "log_namespace": namespace,
                    "log_time": 0,
                }
            )
        return [line.split("] ", 1)[1] for line in out.getvalue().splitlines()]

    assert lines("info") == ["kdraexp.app.service info", "twisted.internet.defer critical"]
    assert lines("error") == ["twisted.internet.defer critical"]
    assert len(lines("debug")) == 4


def test_hostile_values_stay_one_short_line() -> None:
    """Terminal escapes and line breaks an API server sends are escaped, megabytes clipped."""
    hostile = (
        "\x1b[31mred\x1b[0m\r\nforged 2026-01-01T00:00:00Z error [kdraexp] all fine" + "x" * 2**20
    )
    event = {
        "log_format": "Error listing {resource}: {error}",
        "log_level": LogLevel.error,
        "log_namespace": "kdraexp.sources.gather",
        "log_time": 0.0,
        "resource": "resourceclaims",
        "error": hostile,
    }
    text = logs.format_text(event)
    assert text.count("\n") == 1 and text.endswith("\n")
    assert "\x1b" not in text and "\r" not in text
    assert "\\x1b[31mred\\x1b[0m\\x0d\\nforged" in text
    assert len(text) < 5000 and "more characters)" in text
    record = json.loads(logs.format_json(event))
    assert len(record["msg"]) < 5000 and len(record["error"]) < 5000
    assert "\x1b" not in record["msg"]
