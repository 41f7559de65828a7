"""The CEL evaluation process ended while it has nothing to do, started again when it has.

A calm cluster's selector answers are all kept, and with the original families alone none may
ever be asked for: the process would hold 23-27 MiB for nothing.  It is ended after
:data:`IDLE` seconds without a request (looked at every third of that) and started again by
the next request, with its bounds unchanged; the start takes 0.1-0.25 s, not counted as
matching time.
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

from kdraexp.cel.matching import Matcher

IDLE = 90.0
"""Seconds without a request after which the evaluation process is ended."""


class IdleEnding:
    """Ends *matcher*'s evaluation process once idle, on *clock*, from :meth:`start`."""

    def __init__(self, matcher: Matcher, clock: IReactorTime) -> None:
        self._loop = LoopingCall(matcher.idle, IDLE)
        self._loop.clock = clock

    def start(self) -> None:
        """Look every third of :data:`IDLE` from now on."""
        self._loop.start(IDLE / 3, now=False)

    def stop(self) -> None:
        """Look no more (the source stops; it ends the process itself)."""
        if self._loop.running:
            self._loop.stop()
