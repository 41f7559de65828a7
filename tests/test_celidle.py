"""The CEL evaluation process is ended when idle and started again when needed."""

from __future__ import annotations

import threading

import pytest
from twisted.internet.task import Clock

from kdraexp.cel import matching, process
from kdraexp.cel.process import Evaluator
from kdraexp.sources.celidle import IDLE, IdleEnding


@pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL engine on this platform")
def test_an_idle_process_is_ended_and_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the idle time the process goes; the next request starts one, with its bounds.

    One in use (a list matching in a thread holds the evaluator) is never idle, nor waited for.
    """
    now = [1000.0]
    monkeypatch.setattr(process, "_now", lambda: now[0])
    evaluator = Evaluator()
    try:
        assert evaluator.idle(IDLE) is False  # none started yet
        assert evaluator.compile(["1 == 1"]) == [None]  # one started, on demand
        child = evaluator._process
        assert child is not None
        now[0] += IDLE - 1
        assert evaluator.idle(IDLE) is False
        now[0] += 2
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with evaluator._lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        assert evaluator.idle(IDLE) is False  # in use: answered at once, not waited for
        release.set()
        holder.join()
        assert evaluator.idle(IDLE) is True
        assert evaluator._process is None and child.wait(10) is not None
        assert evaluator.compile(["1 == 1"]) == [None]  # another, on demand
        assert evaluator._process is not None and evaluator.kills == 0
    finally:
        evaluator.close()


class _Matcher:
    def __init__(self) -> None:
        self.asked: list[float] = []

    def idle(self, after: float) -> bool:
        self.asked.append(after)
        return False


def test_the_sources_look_every_third_of_the_idle_time() -> None:
    """Started with the source, stopped with it."""
    clock, matcher = Clock(), _Matcher()
    ending = IdleEnding(matcher, clock)  # type: ignore[arg-type]
    ending.start()
    clock.advance(IDLE / 3 - 1)
    assert matcher.asked == []
    clock.advance(1)
    clock.advance(IDLE / 3)
    assert matcher.asked == [IDLE, IDLE]
    ending.stop()
    clock.advance(IDLE)
    assert matcher.asked == [IDLE, IDLE]
    ending.stop()  # twice is harmless
