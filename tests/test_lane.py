"""Costly watch events are applied in a thread, in order, while the reactor goes on.

Before the lane, a watch read each slice on the reactor as its event arrived: against a thousand
DeviceClasses one slice held it about 2 s, and a class change (every kept slice read again)
held it for minutes, probes included.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock, LoopingCall, deferLater

from kdraexp.cel import matching
from kdraexp.cel.classindex import MANY_CLASSES, ClassIndex
from kdraexp.families.selection import select
from kdraexp.sources.watch import WatchGatherer
from kdraexp.telemetry.selfmetrics import CollectionStats
from kdraexp.telemetry.watchstats import WatchStats
from kdraexp.util.lane import Lane
from tests.collect import values
from tests.conftest import in_memory_client
from tests.fakeapi import FakeKubeAPI
from tests.objects import classy, gpu, pool_slice

FAMILY = "kube_resourceslice_device_class"


def _reactor() -> Any:
    from twisted.internet import reactor

    return reactor


def test_cheap_work_is_done_at_once_and_raises_to_the_caller() -> None:
    """Nothing queued, nothing costly: no lane at all, as far as the caller can tell."""
    done: list[str] = []
    lane = Lane(Clock(), lambda: False, lambda error: done.append(repr(error)))
    lane.run(lambda: done.append("work"), lambda: done.append("then"))
    assert done == ["work", "then"]
    with pytest.raises(ZeroDivisionError):
        lane.run(lambda: 1 / 0)


def test_held_work_waits_and_keeps_its_order() -> None:
    """Work that comes while the lane is held runs after the release, in order."""
    done: list[object] = []
    lane = Lane(Clock(), lambda: False, done.append)
    held = Deferred.fromCoroutine(lane.hold())
    assert held.called
    for n in range(3):
        lane.run(functools.partial(done.append, n))
    assert done == [] and lane.busy
    lane.release()
    assert done == [0, 1, 2] and not lane.busy


def test_behind_is_the_wait_of_the_oldest_piece_not_done() -> None:
    """How long the oldest piece has waited, how many wait, and their weight."""
    clock = Clock()
    lane = Lane(clock, lambda: False, lambda error: None)
    assert lane.behind() == (0.0, 0) and lane.weight == 0
    Deferred.fromCoroutine(lane.hold())
    lane.run(lambda: None, weight=10)
    clock.advance(5)
    lane.run(lambda: None, weight=7)
    clock.advance(2)
    assert lane.behind() == (7.0, 2) and lane.weight == 17
    lane.release()
    assert lane.behind() == (0.0, 0) and lane.weight == 0
    Deferred.fromCoroutine(lane.hold())
    lane.run(lambda: None, weight=3)
    lane.clear()
    assert lane.behind() == (0.0, 0) and lane.weight == 0


def test_what_queued_work_raises_goes_to_the_owner_and_drops_the_rest() -> None:
    failures: list[Exception] = []
    done: list[int] = []
    lane = Lane(Clock(), lambda: False, failures.append)
    Deferred.fromCoroutine(lane.hold())
    lane.run(lambda: done.append(1))
    lane.run(lambda: 1 / 0)
    lane.run(lambda: done.append(3))
    lane.release()
    assert done == [1]
    assert [type(f) for f in failures] == [ZeroDivisionError]


@pytest_twisted.ensureDeferred
async def test_costly_work_runs_in_a_thread_and_a_hold_waits_for_it() -> None:
    """The reactor runs while a piece is in its thread; a hold begun meanwhile waits for it."""
    reactor = _reactor()
    freed = threading.Event()
    threads: list[threading.Thread] = []
    order: list[str] = []

    def work() -> None:
        threads.append(threading.current_thread())
        assert freed.wait(10), "the reactor did not run while the piece was in its thread"
        order.append("work")

    lane = Lane(reactor, lambda: True, lambda error: order.append(repr(error)))
    lane.run(work, lambda: order.append("then"))
    reactor.callLater(0.05, freed.set)
    await lane.hold()
    assert order == ["work", "then"]  # the hold waited for the piece and what follows it
    assert threads[0] is not threading.main_thread()
    lane.run(lambda: order.append("after"))
    assert order == ["work", "then"]  # held: nothing starts
    lane.release()
    for _ in range(1000):  # it runs in a thread: poll, with a bound
        if order[-1] == "after":
            break
        await deferLater(reactor, 0.01, lambda: None)
    assert order[-1] == "after"


@pytest.fixture
def pumped() -> Iterator[tuple[FakeKubeAPI, Any]]:
    """A fake API in memory, its answers delivered as the real reactor turns."""
    fake = FakeKubeAPI()
    client, agent = in_memory_client(fake, _reactor())
    pump = LoopingCall(agent.flush)
    pump.clock = _reactor()
    pump.start(0.002)
    yield fake, client
    pump.stop()


@pytest_twisted.ensureDeferred
async def test_a_watch_matches_costly_slices_off_the_reactor(
    pumped: tuple[FakeKubeAPI, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MANY_CLASSES classes, each slice is matched in a thread, the reactor running.

    At the sync, at an event, and when a class changes (every kept slice read again).
    """
    if not matching.AVAILABLE:
        pytest.skip("no CEL runtime on this platform")
    reactor = _reactor()
    fake, client = pumped
    for c in range(MANY_CLASSES + 1):
        fake.add("deviceclasses", classy(f"c{c}", "device.driver == 'gpu.nvidia.com'"))
    for s in range(2):
        fake.add("resourceslices", pool_slice(f"s{s}", [gpu(f"g{s}-{i}") for i in range(4)]))
    on_reactor: list[str] = []
    ticks = [0]
    prepare = ClassIndex.prepare

    def watched_prepare(self: ClassIndex, devices: Any) -> None:
        if threading.current_thread() is threading.main_thread():
            on_reactor.append(devices[0].name)
        else:
            seen = ticks[0]
            for _ in range(1000):  # the reactor turns while this slice is matched
                if ticks[0] > seen + 1:
                    break
                threading.Event().wait(0.01)
        prepare(self, devices)

    monkeypatch.setattr(ClassIndex, "prepare", watched_prepare)
    ticking = LoopingCall(lambda: ticks.__setitem__(0, ticks[0] + 1))
    ticking.clock = reactor
    ticking.start(0.005)
    selection = select()
    collections = CollectionStats()
    stats = WatchStats(collections, (kind.plural for kind in selection.kinds), 300.0)
    gatherer = WatchGatherer(client, reactor, stats, selection, 300.0)
    try:
        gatherer.start()
        for _ in range(1000):
            if gatherer.ready:
                break
            await deferLater(reactor, 0.01, lambda: None)
        assert gatherer.ready
        fake.change("resourceslices", "MODIFIED", pool_slice("s0", [gpu("g0-new")]))
        fake.change("deviceclasses", "ADDED", classy("late", "device.driver == 'gpu.nvidia.com'"))
        for _ in range(1000):
            matched = values(await gatherer.gather(), FAMILY, "deviceclass_name", "device_name")
            if ("late", "g0-new") in matched and ("late", "g1-3") in matched:
                break
            await deferLater(reactor, 0.01, lambda: None)
        assert ("late", "g1-3") in matched and ("c0", "g0-new") in matched
        assert ("c0", "g0-0") not in matched
        assert len(matched) == (MANY_CLASSES + 2) * 5  # every class over the 5 devices now
        assert on_reactor == []
    finally:
        gatherer.stop()
        ticking.stop()
