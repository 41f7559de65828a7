"""How long the reactor's turns take: a timer due every :data:`TICK` seconds, and how late it ran.

While one piece of work holds the reactor, nothing else runs: not ``/healthz``, not a watch's
events.  A timer that should have run meanwhile runs when that turn ends, late by about the
turn's length (to within :data:`TICK`).  Its lateness is kept in a histogram; a turn over
:data:`SLOW` is counted and logged with what the exporter was doing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

log = Logger()

TICK = 0.02
"""Seconds between two looks at the clock: a turn shorter than this may go unseen."""
SLOW = 0.1
"""Seconds of a turn past which it is counted and logged."""
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Turn length buckets, seconds: a calm reactor in the first, a stall in the last."""


class TurnWatch(Collector):
    """Measures each turn by the lateness of a timer; counts and logs those over :data:`SLOW`."""

    def __init__(self, clock: IReactorTime, doing: Callable[[], str]) -> None:
        self._clock = clock
        self._doing = doing
        """What the exporter is doing now, in words (named in the line of a slow turn)."""
        self._counts = [0.0] * (len(BUCKETS) + 2)
        """Count per bucket (cumulative when collected), then the sum."""
        self._slow = 0
        self._due = 0.0
        self._call: IDelayedCall | None = None
        self._before = ""
        """What the exporter was doing at the last tick: the turn that ends a phase may hold."""

    def start(self) -> None:
        """Begin measuring."""
        self._next()

    def stop(self) -> None:
        """Stop measuring."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _next(self) -> None:
        self._before = self._doing()
        self._due = self._clock.seconds() + TICK
        self._call = self._clock.callLater(TICK, self._tick)

    def _tick(self) -> None:
        late = max(0.0, self._clock.seconds() - self._due)
        self._observe(late)
        if late > SLOW:
            self._slow += 1
            now = self._doing()
            log.warn(
                "A turn of the reactor took {seconds:.3f}s (over {slow:g}s), nothing else"
                " running meanwhile; the exporter was {doing}",
                seconds=late,
                slow=SLOW,
                doing=now if now == self._before else f"{self._before}, then {now}",
            )
        self._next()

    def _observe(self, seconds: float) -> None:
        index = next((i for i, bound in enumerate(BUCKETS) if seconds <= bound), len(BUCKETS))
        self._counts[index] += 1
        self._counts[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        """The two families."""
        turns = HistogramMetricFamily(
            "kube_dra_exporter_reactor_turn_seconds",
            f"Turns of the reactor, each measured by how late a timer due every {TICK:g}s ran.",
        )
        cumulative, buckets = 0.0, list[tuple[str, float]]()
        for bound, observed in zip([*map(str, BUCKETS), "+Inf"], self._counts[:-1], strict=True):
            cumulative += observed
            buckets.append((bound, cumulative))
        turns.add_metric([], buckets, self._counts[-1])
        yield turns
        yield CounterMetricFamily(
            "kube_dra_exporter_reactor_slow_turns",
            f"Turns of the reactor over {SLOW:g}s: nothing else was answered meanwhile.",
            value=self._slow,
        )
