"""Giving the reactor its turns: long work yields every :data:`TURN` seconds.

Reading a page of 500 slices, or rendering a family of 160,000 samples, takes longer than a
probe may wait; such work checks the clock as it goes and, past :data:`TURN`, lets the reactor
answer whatever is waiting (``/healthz``, other scrapes) before it goes on.  On a test's
``Clock``, whose time stands still, it never yields.
"""

from __future__ import annotations

from collections.abc import Sequence, Sized
from typing import Protocol, TypeVar

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool

from kdraexp.util.reactor import thread_pool

TURN = 0.01
"""Seconds of work after which the reactor gets a turn."""
CHUNK = 64
"""Objects read between two looks at the clock, unless the reader says fewer (``chunk``): a
look and a page call cost a few microseconds, a fifth of a calm scrape's time with one look per
object."""
CHUNK_BYTES = 1 << 20
"""Bytes of JSON read between two looks at the clock, whatever their objects' number: 64 claims
of 10,000 labels each took 1.2-1.9 s to read."""


class Turns:
    """Tells long work when to yield, and yields."""

    def __init__(self, clock: IReactorTime | None) -> None:
        self._clock = clock
        self._since = clock.seconds() if clock is not None else 0.0

    @classmethod
    def never(cls) -> Turns:
        """Turns that never yield (for work done where there is no reactor to yield to)."""
        return cls(None)

    async def take(self) -> None:
        """Yield to the reactor if this work has had the CPU for :data:`TURN` seconds."""
        clock = self._clock
        if clock is not None and clock.seconds() - self._since > TURN:
            await deferLater(clock, 0, lambda: None)
            self._since = clock.seconds()


T_contra = TypeVar("T_contra", bound=Sized, contravariant=True)
"""An item: an object's JSON, whose length bounds how many are read at once."""


class Pages(Protocol[T_contra]):
    """What :func:`feed` hands one response's items to, a few at a time."""

    @property
    def chunk(self) -> int:
        """Items read between two looks at the clock (:data:`CHUNK`, or fewer costly ones)."""

    @property
    def off_reactor(self) -> bool:
        """Whether the rest of the items is read in a thread of the reactor's pool."""

    def response(self) -> None:
        """A new response's items follow (what they become is bounded per response)."""

    def page(self, items: Sequence[T_contra]) -> None:
        """Read some of the response's items."""


async def feed(reader: Pages[T_contra], items: Sequence[T_contra], clock: IReactorTime) -> None:
    """Hand *items*, one response's, to ``reader.page``, without holding the reactor.

    They are read a few at a time, giving the reactor its turns; once the reader says so
    (``off_reactor``: one object's DeviceClass selectors may take seconds), the rest is read in
    a thread of the reactor's pool while the reactor goes on.
    """
    pool = thread_pool(clock)
    turns = Turns(clock)
    chunk = reader.chunk
    reader.response()  # what the items become is bounded per response
    start = 0
    while start < len(items):
        if pool is not None and reader.off_reactor:
            await deferToThreadPool(clock, pool(), reader.page, list(items[start:]))  # type: ignore[arg-type]
            return
        end, size = start, 0
        while end < len(items) and end - start < chunk and size < CHUNK_BYTES:
            size += len(items[end])
            end += 1
        reader.page(items[start:end])
        start = end
        await turns.take()
