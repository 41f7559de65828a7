"""Reaping orphans when the exporter is PID 1, as it is in its container.

A process whose parent ended is adopted by PID 1, which must wait for it or it stays a zombie
for good: helpers an exec credential plugin started, or left behind when its group was killed.
Twisted waits only for the processes it started.  Every :data:`PERIOD` seconds the exporter
waits for its other children that have ended.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from twisted.application.internet import TimerService
from twisted.internet import process
from twisted.logger import Logger

log = Logger()

PERIOD = 5.0


def reap_orphans() -> int:
    """Wait for every ended child that Twisted is not waiting for; return how many."""
    reaped = 0
    for pid in _ended_children():
        if pid in process.reapProcessHandlers:
            continue  # Twisted's own: it reaps it and reports its status
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        reaped += 1
    return reaped


def _ended_children() -> Iterator[int]:
    me = os.getpid()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as children:
                pids = [int(pid) for pid in children.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] == "Z" and int(fields[1]) == me:
                yield pid


class OrphanReaper(TimerService):
    """Reaps orphans every :data:`PERIOD` seconds (run only as PID 1)."""

    def __init__(self) -> None:
        super().__init__(PERIOD, reap_orphans)
