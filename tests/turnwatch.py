"""The exporter with a watch on its reactor: how late a call due every 10 ms ran, at worst.

``python -m tests.turnwatch OUT ARGS...`` runs ``kdraexp ARGS`` with a call scheduled every
:data:`EVERY` seconds on its reactor; the longest it ran past its time is the longest turn the
reactor took, and is written to the file OUT when the exporter stops.  Measured inside the
exporter, not through requests: a busy test process does not count.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

EVERY = 0.01
"""Seconds between two calls."""


class Watch:
    """The longest delay of a call due every :data:`EVERY` seconds."""

    def __init__(self, reactor: object) -> None:
        self._reactor = reactor
        self.longest = 0.0
        self._due = time.monotonic() + EVERY
        reactor.callLater(EVERY, self._tick)  # type: ignore[attr-defined]

    def _tick(self) -> None:
        now = time.monotonic()
        self.longest = max(self.longest, now - self._due)
        self._due = now + EVERY
        self._reactor.callLater(EVERY, self._tick)  # type: ignore[attr-defined]


def main() -> None:
    """Run the exporter with the watch; write the longest delay at its end."""
    from twisted.internet import reactor

    from kdraexp.app.cli import main as exporter

    out, args = Path(sys.argv[1]), sys.argv[2:]
    watch: list[Watch] = []
    reactor.callWhenRunning(lambda: watch.append(Watch(reactor)))
    reactor.addSystemEventTrigger(
        "before", "shutdown", lambda: out.write_text(f"{watch[0].longest:.6f}\n")
    )
    exporter(args)


if __name__ == "__main__":
    main()
