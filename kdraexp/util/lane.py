"""Work on one object in order, the costly part in a thread while the reactor goes on.

A watch applies each event to its kind's reader as it arrives.  When reading an object is
costly (a slice's devices matched against a thousand DeviceClasses takes seconds), the reactor
must not wait for it: the work is queued, and done in order in a thread of the reactor's pool,
one piece at a time; what follows each piece (statistics, callbacks) runs on the reactor.  A
scrape holds the lane (:meth:`~Lane.hold`) while it reads the object: no piece runs meanwhile.
While reading is cheap and nothing is queued, work is done at once, as if there were no lane.
Each piece may carry a weight (an event's bytes): the owner bounds what waits by it, and
:meth:`Lane.behind` says how long the oldest piece has waited.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.threads import deferToThreadPool

from kdraexp.util.reactor import thread_pool

Work = Callable[[], object]


class Lane:
    """One object's work, in order; each piece in a thread while *costly* says so."""

    def __init__(
        self,
        clock: IReactorTime,
        costly: Callable[[], bool],
        failed: Callable[[Exception], object],
    ) -> None:
        self._clock = clock
        self._costly = costly
        self._failed = failed
        """Called on the reactor with what a queued piece raised; what was queued is dropped."""
        self._queue: collections.deque[tuple[Work | None, Work | None, float, int]] = (
            collections.deque()
        )
        """Each piece: its work, what follows it, when it was queued, its weight."""
        self.weight = 0
        """The weight of the pieces queued."""
        self._since: float | None = None
        """When the piece running now was queued."""
        self._running = False
        self._held = 0
        self._waiting: list[Deferred[None]] = []

    @property
    def busy(self) -> bool:
        """Whether work is queued or running."""
        return self._running or bool(self._queue)

    def run(self, work: Work | None, then: Work | None = None, weight: int = 0) -> None:
        """Do *work* (maybe in a thread), then *then* on the reactor, after what is queued.

        Done at once when nothing is queued or held and reading is cheap; what either raises
        then reaches the caller, as if there were no lane.
        """
        if not self.busy and not self._held and not self._costly():
            if work is not None:
                work()
            if then is not None:
                then()
            return
        self._queue.append((work, then, self._clock.seconds(), weight))
        self.weight += weight
        self._go()

    def clear(self) -> None:
        """Drop what is queued (a piece in a thread finishes)."""
        self._queue.clear()
        self.weight = 0

    def behind(self) -> tuple[float, int]:
        """Seconds the oldest piece not done yet has waited, and how many pieces wait."""
        since = self._since if self._since is not None else None
        if since is None and self._queue:
            since = self._queue[0][2]
        return (0.0 if since is None else self._clock.seconds() - since), len(self._queue)

    async def hold(self) -> None:
        """Wait until no piece runs; none starts until :meth:`release`."""
        self._held += 1
        if self._running:
            waiting: Deferred[None] = Deferred()
            self._waiting.append(waiting)
            await waiting

    def release(self) -> None:
        """End a :meth:`hold`: the queued work goes on."""
        self._held -= 1
        self._go()

    @staticmethod
    @contextlib.asynccontextmanager
    async def holding(lanes: Iterable[Lane]) -> AsyncIterator[None]:
        """Hold every lane of *lanes* for the block (see :meth:`hold`)."""
        held: list[Lane] = []
        try:
            for lane in lanes:
                held.append(lane)
                await lane.hold()
            yield
        finally:
            for lane in held:
                lane.release()

    def _go(self) -> None:
        if not self._running and not self._held and self._queue:
            self._running = True
            Deferred.fromCoroutine(self._drain())

    async def _drain(self) -> None:
        pool = thread_pool(self._clock)
        try:
            while self._queue and not self._held:
                work, then, self._since, weight = self._queue.popleft()
                self.weight -= weight
                try:
                    if work is not None:
                        if pool is not None and self._costly():
                            await deferToThreadPool(self._clock, pool(), work)  # type: ignore[arg-type]
                        else:
                            work()
                    if then is not None:
                        then()
                except Exception as error:  # handed to the owner, as raised
                    self.clear()
                    self._failed(error)
                finally:
                    self._since = None
        finally:
            self._running = False
            waiting, self._waiting = self._waiting, []
            for one in waiting:
                one.callback(None)
