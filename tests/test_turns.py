"""Long work yields to the reactor once it has had the CPU for a turn."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest_twisted
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from kdraexp.util.turns import CHUNK, CHUNK_BYTES, TURN, feed


class BusyClock(Clock):
    """A clock on which each look at the time finds a little more of it gone."""

    def seconds(self) -> float:
        self.rightNow += TURN / 4
        return self.rightNow


class Pages:
    chunk = CHUNK
    off_reactor = False

    def __init__(self) -> None:
        self.items: list[bytes] = []
        self.pages: list[int] = []

    def response(self) -> None:
        pass

    def page(self, items: Sequence[bytes]) -> None:
        self.items.extend(items)
        self.pages.append(len(items))


def objects(count: int, size: int = 1) -> list[bytes]:
    """*count* objects' JSON of *size* bytes, each telling its number."""
    return [str(n).encode().ljust(size) for n in range(count)]


def test_feed_yields_and_finishes() -> None:
    """Fed items in chunks; between turns the reactor runs; every item arrives, in order."""
    clock = BusyClock()
    reader = Pages()
    done = Deferred.fromCoroutine(feed(reader, objects(CHUNK * 20), clock))
    assert not done.called and 0 < len(reader.items) < CHUNK * 20
    while not done.called:
        clock.advance(0)
    assert reader.items == objects(CHUNK * 20)


def test_still_clock_never_yields() -> None:
    """On a clock whose time stands still, the work runs to its end at once."""
    reader = Pages()
    done = Deferred.fromCoroutine(feed(reader, objects(CHUNK * 20), Clock()))
    assert done.called and len(reader.items) == CHUNK * 20


def test_large_objects_are_read_a_few_at_a_time() -> None:
    """A look at the clock every :data:`CHUNK_BYTES` of JSON, however few objects that is."""
    reader = Pages()
    Deferred.fromCoroutine(feed(reader, objects(10, CHUNK_BYTES * 3 // 5), Clock()))
    assert reader.pages == [2, 2, 2, 2, 2]
    small = Pages()
    Deferred.fromCoroutine(feed(small, objects(CHUNK * 2), Clock()))
    assert small.pages == [CHUNK, CHUNK]


@pytest_twisted.ensureDeferred
async def test_a_reader_off_the_reactor_reads_while_the_reactor_runs() -> None:
    """Its page is read in a thread: the reactor answers meanwhile (here it frees the page)."""
    from twisted.internet import reactor

    freed = threading.Event()

    class Slow(Pages):
        off_reactor = True

        def page(self, items: Sequence[bytes]) -> None:
            self.thread = threading.current_thread()
            assert freed.wait(10), "the reactor did not run while the page was read"
            super().page(items)

    reader = Slow()
    reactor.callLater(0.05, freed.set)
    await feed(reader, objects(5), reactor)
    assert reader.items == objects(5)
    assert reader.thread is not threading.main_thread()
