"""One in-flight call shared by every concurrent caller, alone or one per key."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class SingleFlight(Generic[T]):
    """Share one call of *start* among the callers that arrive while it runs.

    Each caller gets its own Deferred.  Cancelling it only lets that caller go; the shared call
    is cancelled when the last caller has gone, so an abandoned scrape stops its list calls,
    unless *abandon* is false: then it runs on (work that cannot be stopped, such as a thread,
    or whose result is kept for the next caller).
    """

    def __init__(self, start: Callable[[], Deferred[T]], abandon: bool = True) -> None:
        self._start = start
        self._abandon = abandon
        self._inflight: Deferred[T] | None = None
        self._waiters: list[Deferred[T]] = []

    @property
    def running(self) -> bool:
        """Whether a shared call is in flight."""
        return self._inflight is not None

    def __call__(self) -> Deferred[T]:
        """Join the call in flight, or start one."""
        waiter: Deferred[T] = Deferred(canceller=self._leave)
        self._waiters.append(waiter)
        if self._inflight is None:
            inflight = self._inflight = self._start()
            inflight.addBoth(self._finished)
        return waiter

    def cancel(self) -> None:
        """Cancel the shared call, failing every caller with ``CancelledError``."""
        if self._inflight is not None:
            self._inflight.cancel()

    def _leave(self, waiter: Deferred[T]) -> None:
        if waiter in self._waiters:
            self._waiters.remove(waiter)
        if self._abandon and not self._waiters and self._inflight is not None:
            self._inflight.cancel()

    def _finished(self, result: T | Failure) -> None:
        waiters, self._waiters, self._inflight = self._waiters, [], None
        if isinstance(result, Failure):
            # Its traceback's frames hold what the call held (a failed collection's objects),
            # in a cycle only the collector's rare full pass frees: the waiters need the error.
            result.cleanFailure()
        for waiter in waiters:
            if isinstance(result, Failure):
                waiter.errback(result)
            else:
                waiter.callback(result)


class KeyedFlights(Generic[K, T]):
    """A :class:`SingleFlight` per key while its call runs: callers of one key share one call.

    A key is forgotten when its call ends, so the next caller starts a new one; *abandon* as
    for :class:`SingleFlight`.
    """

    def __init__(self, abandon: bool = True) -> None:
        self._abandon = abandon
        self._flights: dict[K, SingleFlight[T]] = {}

    def __contains__(self, key: K) -> bool:
        """Whether a call for *key* is in flight."""
        return key in self._flights

    def __call__(self, key: K, start: Callable[[], Deferred[T]]) -> Deferred[T]:
        """Join the call in flight for *key*, or start one with *start*."""
        flight = self._flights.get(key)
        if flight is None:

            def started() -> Deferred[T]:
                return start().addBoth(self._ended, key)

            flight = self._flights[key] = SingleFlight(started, self._abandon)
        return flight()

    def _ended(self, result: T | Failure, key: K) -> T | Failure:
        del self._flights[key]
        return result
