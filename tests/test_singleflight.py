"""One call shared by concurrent callers: alone (SingleFlight) and one per key (KeyedFlights)."""

from __future__ import annotations

from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure

from kdraexp.util.singleflight import KeyedFlights, SingleFlight
from tests.conftest import result_of


class Calls:
    """Calls started, each a Deferred the test fires or sees cancelled."""

    def __init__(self) -> None:
        self.started: list[Deferred[str]] = []
        self.cancelled = 0

    def start(self) -> Deferred[str]:
        def cancelled(_: Deferred[str]) -> None:
            self.cancelled += 1

        self.started.append(Deferred(cancelled))
        return self.started[-1]


def test_callers_share_one_call() -> None:
    calls = Calls()
    flight = SingleFlight(calls.start)
    first, second = flight(), flight()
    assert len(calls.started) == 1 and flight.running
    calls.started[0].callback("done")
    assert (result_of(first), result_of(second)) == ("done", "done")
    assert not flight.running
    flight()
    assert len(calls.started) == 2  # the next caller after the end starts again


def test_a_failure_reaches_every_caller() -> None:
    calls = Calls()
    flight = SingleFlight(calls.start)
    waiting = [flight(), flight()]
    calls.started[0].errback(ValueError("broken"))
    failures: list[Failure] = []
    for waiter in waiting:
        waiter.addErrback(failures.append)
    assert [type(failure.value) for failure in failures] == [ValueError, ValueError]


def test_the_last_caller_gone_cancels_the_call_unless_it_runs_on() -> None:
    for abandon, cancelled in ((True, 1), (False, 0)):
        calls = Calls()
        flight = SingleFlight(calls.start, abandon=abandon)
        first, second = flight(), flight()
        first.cancel()
        assert calls.cancelled == 0  # one still waits
        second.cancel()
        assert calls.cancelled == cancelled
        for waiter in (first, second):
            waiter.addErrback(lambda failure: failure.trap(CancelledError))


def test_keys_fly_apart_and_are_forgotten_when_done() -> None:
    calls: dict[str, Calls] = {"a": Calls(), "b": Calls()}
    flights: KeyedFlights[str, str] = KeyedFlights(abandon=False)
    a1, a2, b1 = (
        flights("a", calls["a"].start),
        flights("a", calls["a"].start),
        flights("b", calls["b"].start),
    )
    assert [len(c.started) for c in calls.values()] == [1, 1]
    calls["a"].started[0].callback("A")
    assert (result_of(a1), result_of(a2)) == ("A", "A")
    assert not b1.called
    a3 = flights("a", calls["a"].start)
    assert len(calls["a"].started) == 2  # a new call for a key whose call ended
    calls["a"].started[1].errback(ValueError("again"))
    a3.addErrback(lambda failure: failure.trap(ValueError))
    calls["b"].started[0].callback("B")
    assert result_of(b1) == "B"
    assert not flights._flights  # nothing kept of the keys whose calls ended


def test_a_keyed_caller_gone_lets_a_call_run_on() -> None:
    calls = Calls()
    flights: KeyedFlights[str, str] = KeyedFlights(abandon=False)
    waiter = flights("k", calls.start)
    waiter.cancel()
    waiter.addErrback(lambda failure: failure.trap(CancelledError))
    assert calls.cancelled == 0
    late = flights("k", calls.start)  # joins the call still running
    assert len(calls.started) == 1
    calls.started[0].callback("kept")
    assert result_of(late) == "kept"
