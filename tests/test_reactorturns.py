"""The reactor's turns measured by a timer's lateness: counted, and a slow one logged."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from kdraexp.telemetry.reactorturns import SLOW, TICK, TurnWatch
from kdraexp.telemetry.selfmetrics import registry

TURNS = "kube_dra_exporter_reactor_turn_seconds"
SLOW_TURNS = "kube_dra_exporter_reactor_slow_turns_total"


def test_a_turn_that_holds_the_reactor_is_measured_counted_and_named() -> None:
    """Calm ticks are on time; a turn of 0.5 s makes the next tick 0.5 s late: logged, counted."""
    clock = Clock()
    watch = TurnWatch(clock, lambda: "listing and reading resourceclaims")
    metrics = registry(watch)
    watch.start()
    with capturedLogs() as events:
        for _ in range(10):
            clock.advance(TICK)
        clock.advance(TICK + 0.5)  # one turn held the reactor past the tick's time
        clock.advance(TICK)
    assert metrics.get_sample_value(f"{TURNS}_count") == 12
    assert metrics.get_sample_value(f"{TURNS}_bucket", {"le": "0.005"}) == 11
    assert metrics.get_sample_value(f"{TURNS}_bucket", {"le": "0.25"}) == 11
    assert metrics.get_sample_value(f"{TURNS}_bucket", {"le": "0.5"}) == 12
    assert metrics.get_sample_value(f"{TURNS}_sum") == 0.5
    assert metrics.get_sample_value(SLOW_TURNS) == 1
    assert [e["log_format"].format(**e) for e in events] == [
        f"A turn of the reactor took 0.500s (over {SLOW:g}s), nothing else running meanwhile;"
        " the exporter was listing and reading resourceclaims"
    ]


def test_a_slow_turn_that_ended_a_phase_names_both() -> None:
    """The phase before the turn is named too: the turn that ends a phase may be the slow one."""
    clock = Clock()
    doing = ["counting and logging the values a collection could not read"]
    watch = TurnWatch(clock, lambda: doing[0])
    watch.start()
    with capturedLogs() as events:
        clock.advance(TICK)
        doing[0] = "between collections"
        clock.advance(TICK + 0.2)
    assert [e["doing"] for e in events] == [
        "counting and logging the values a collection could not read, then between collections"
    ]


def test_stopped_it_leaves_no_timer() -> None:
    clock = Clock()
    watch = TurnWatch(clock, lambda: "")
    watch.start()
    clock.advance(TICK)
    watch.stop()
    assert clock.getDelayedCalls() == []
