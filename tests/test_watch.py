"""Watch mode against the fake API in memory: synchronised once, then followed event by event."""

from __future__ import annotations

import gc
import json
import tracemalloc
from functools import partial
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from kdraexp.dra.listing import ListError
from kdraexp.families.selection import Selection, select
from kdraexp.serve.web import ExporterApp
from kdraexp.sources.protocol import CollectionFailed, NotSynced
from kdraexp.sources.watch import BACKOFF, IDLE, WatchGatherer
from kdraexp.telemetry.selfmetrics import CollectionStats, registry
from kdraexp.telemetry.watchstats import WatchStats
from tests.collect import text
from tests.conftest import failure_of, in_memory_client, result_of
from tests.fakeapi import FakeKubeAPI, Fault, status
from tests.objects import SEED_CLAIM, SEED_CLASS, SEED_SLICE, device_class


class Watched:
    """The watch gatherer over a fake API, and the means to move things along."""

    def __init__(
        self,
        fake: FakeKubeAPI,
        clock: Clock,
        staleness: float = 300.0,
        selection: Selection | None = None,
    ) -> None:
        self.fake = fake
        self.clock = clock
        self.client, self.agent = in_memory_client(fake, clock)
        self.collections = CollectionStats()
        selection = selection or select()
        self.stats = WatchStats(
            self.collections, (kind.plural for kind in selection.kinds), staleness
        )
        self.gatherer = WatchGatherer(self.client, clock, self.stats, selection, staleness)

    def settle(self) -> None:
        for _ in range(50):
            self.agent.flush()
            self.clock.advance(0)

    def text(self) -> str:
        pending = self.gatherer.gather()
        self.settle()
        return text(result_of(pending))

    def failure(self) -> BaseException:
        """What a collection asked for now fails with (it must fail)."""
        pending = self.gatherer.gather()
        self.settle()
        failure = failure_of(pending).value
        assert failure is not None
        return failure

    def metric(self, name: str, labels: dict[str, str]) -> float | None:
        value = registry(self.stats, self.collections).get_sample_value(name, labels)
        return value


def seed(fake: FakeKubeAPI) -> None:
    fake.add("deviceclasses", SEED_CLASS)
    fake.add("resourceslices", SEED_SLICE)
    fake.add("resourceclaims", SEED_CLAIM)


def synced(fake: FakeKubeAPI, clock: Clock, **options: Any) -> Watched:
    """A gatherer of the seeded *fake*, started and settled: synchronised, unless it fails."""
    seed(fake)
    watched = Watched(fake, clock, **options)
    watched.gatherer.start()
    watched.settle()
    return watched


@pytest.fixture
def watched(fake: FakeKubeAPI, clock: Clock) -> Watched:
    seed(fake)
    return Watched(fake, clock)


def claim(name: str, **status_: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"}, "status": status_}


def test_streaming_sync_then_events(watched: Watched) -> None:
    """Synchronised by a streaming list; an added, changed, deleted object shows at once."""
    pending = watched.gatherer.gather()
    assert isinstance(failure_of(pending).value, NotSynced)
    watched.gatherer.start()
    watched.settle()
    assert watched.gatherer.ready
    lists = watched.fake.lists()
    assert lists == []  # streaming lists, no plain list at all
    first = watched.text()
    assert "kube_resourceclaim_status_reserved_total{" in first
    watched.fake.change("resourceclaims", "ADDED", claim("new"))
    watched.settle()
    assert 'resourceclaim_name="new"' in watched.text()
    watched.fake.change("resourceclaims", "DELETED", claim("new"))
    watched.settle()
    after = watched.text()
    assert 'resourceclaim_name="new"' not in after
    assert (
        watched.metric(
            "kube_dra_exporter_watch_events_total",
            {"resource": "resourceclaims", "type": "DELETED"},
        )
        == 1
    )
    assert watched.fake.lists() == []  # scrapes list nothing


def test_scrape_without_changes_makes_no_request(watched: Watched) -> None:
    """Once synchronised, scrapes cost the API server nothing."""
    watched.gatherer.start()
    watched.settle()
    watched.text()
    before = len(watched.fake.requests)
    for _ in range(5):
        watched.text()
    assert len(watched.fake.requests) == before


def test_a_change_then_a_delete_between_scrapes(watched: Watched) -> None:
    """An object modified, then deleted before the next scrape, is gone from it.

    The controller manager does this to a generated claim within milliseconds: deallocated,
    its finalizer removed, deleted.
    """
    watched.gatherer.start()
    watched.settle()
    assert "kube_resourceclaim_info{" in watched.text()
    changed = {**SEED_CLAIM, "status": {}}
    watched.fake.change("resourceclaims", "MODIFIED", changed)
    watched.fake.change("resourceclaims", "DELETED", changed)
    watched.settle()
    assert "kube_resourceclaim_info{" not in watched.text()


def test_list_then_watch_without_streaming(watched: Watched) -> None:
    """A server refusing streaming lists: a paged list, then a watch from its version."""
    watched.fake.streaming = False
    watched.gatherer.start()
    watched.settle()
    assert watched.gatherer.ready
    assert {r.plural for r in watched.fake.lists()} == {
        "deviceclasses",
        "resourceslices",
        "resourceclaims",
    }
    watched.fake.change("resourceclaims", "ADDED", claim("late"))
    watched.settle()
    assert 'resourceclaim_name="late"' in watched.text()


def test_closed_watch_resumes_compacted_one_relists(watched: Watched) -> None:
    """A watch the server ends resumes from its version; one too old (410) lists again."""
    relists = "kube_dra_exporter_watch_relists_total"
    expired = partial(watched.metric, relists, {"resource": "resourceclaims", "cause": "expired"})
    watched.gatherer.start()
    watched.settle()
    watched.fake.close_watches()
    watched.fake.change("resourceclaims", "ADDED", claim("while-closed"))
    watched.settle()
    assert 'resourceclaim_name="while-closed"' in watched.text()
    assert expired() is None
    watched.fake.close_watches()
    watched.fake.change("resourceclaims", "ADDED", claim("after-compaction"))
    watched.fake.compact()
    watched.settle()
    assert 'resourceclaim_name="after-compaction"' in watched.text()
    assert expired() == 1


def watch_requests(watched: Watched, plural: str = "resourceclaims") -> int:
    return len([r for r in watched.fake.requests if "watch" in r.args and r.plural == plural])


def test_idle_watch_is_a_failure_stale_since_it_went_silent(
    fake: FakeKubeAPI, clock: Clock
) -> None:
    """A watch that delivers nothing (not even bookmarks) failed: stale since its last word.

    It is opened again after a backoff; the state it served was last known current when its
    last event or bookmark was applied, so past --max-staleness the scrape fails at once.
    """
    watched = synced(fake, clock, staleness=10)
    watches = watch_requests(watched)
    watched.clock.advance(IDLE + 1)
    watched.settle()
    assert watched.metric("kube_dra_exporter_watch_restarts_total", {"resource": "resourceclaims"})
    assert watched.metric(
        "kube_dra_exporter_watch_failing_since_timestamp_seconds", {"resource": "resourceclaims"}
    ) == pytest.approx(0.0)
    failed = watched.gatherer.gather()
    watched.settle()
    error = failure_of(failed).value
    assert isinstance(error, CollectionFailed)
    assert {(e.resource, e.reason) for e in error.errors} >= {("resourceclaims", "Timeout")}
    said = watched.gatherer._watches["resourceclaims"].error
    assert said is not None and said.message == (
        "the watch sent nothing, not even a bookmark, for 150s"
    )
    watched.clock.advance(BACKOFF[0])
    watched.settle()
    assert watch_requests(watched) > watches
    watched.fake.bookmark()  # bookmarks keep a watch alive
    watched.settle()
    assert "kube_resourceclaim_info{" in watched.text()


def test_watch_ended_at_once_backs_off_and_goes_stale(fake: FakeKubeAPI, clock: Clock) -> None:
    """A server (or a proxy) answering every watch 200 with nothing: a failure, not a success.

    Reopened at once, it would be asked twenty times a second and never go stale, serving a
    deleted object for as long as it lasts.
    """
    watched = synced(fake, clock, staleness=10)
    assert "kube_resourceclaim_info{" in watched.text()
    watches = watch_requests(watched)
    watched.fake.faults["resourceclaims"] = Fault(200, b"", times=50)  # bounded: a loop ends
    watched.fake.close_watches()
    for _ in range(11):
        watched.clock.advance(1)
        watched.settle()
    assert watch_requests(watched) - watches + len(watched.fake.lists()) <= 5  # backing off
    failed = watched.gatherer.gather()
    watched.settle()
    error = failure_of(failed).value
    assert isinstance(error, CollectionFailed)
    assert [(e.resource, e.reason) for e in error.errors] == [("resourceclaims", "Transport")]
    said = watched.gatherer._watches["resourceclaims"].error
    assert said is not None and said.message.startswith(
        "the watch ended at once, having sent nothing"
    )
    assert watched.metric(
        "kube_dra_exporter_list_errors_total", {"resource": "resourceclaims", "reason": "Transport"}
    )


def selecting(name: str, expression: str) -> dict[str, Any]:
    selector = {"cel": {"expression": expression}}
    return {"metadata": {"name": name}, "spec": {"selectors": [selector]}}


def matched(text: str, name: str) -> list[str]:
    """The device_class rows of class *name*."""
    return [
        line
        for line in text.splitlines()
        if line.startswith("kube_resourceslice_device_class{") and f'"{name}"' in line
    ]


def test_class_changes_rederive_slices_without_a_list(watched: Watched) -> None:
    """A DeviceClass added, changed, deleted: the kept slices are matched again, unlisted.

    No list request and no new slices watch; the rows come back equal to the first ones.
    """
    watched.gatherer.start()
    watched.settle()
    before = watched.text()
    assert matched(before, "everything") == []
    requests = len(watched.fake.requests)
    watched.fake.change("deviceclasses", "ADDED", selecting("everything", "true"))
    watched.settle()
    added = watched.text()
    assert len(matched(added, "everything")) == 1
    watched.fake.change("deviceclasses", "MODIFIED", selecting("everything", "false"))
    watched.settle()
    assert matched(watched.text(), "everything") == []
    watched.fake.change("deviceclasses", "MODIFIED", selecting("everything", "true"))
    watched.settle()
    assert matched(watched.text(), "everything") == matched(added, "everything")
    watched.fake.change("deviceclasses", "DELETED", selecting("everything", "true"))
    watched.settle()
    assert watched.text() == before
    assert watched.fake.requests[requests:] == []
    relisted = {"resource": "resourceslices", "cause": "classes"}
    assert watched.metric("kube_dra_exporter_watch_relists_total", relisted) is None


def stale_until_a_bookmark_of_now(
    watched: Watched, watch: Any, version: str | None, fake: FakeKubeAPI
) -> None:
    """The watch kept at *version*: stale past the staleness, current again by a bookmark of now."""
    assert watch._version == version
    failed = watched.gatherer.gather()
    watched.settle()
    error = failure_of(failed).value
    assert isinstance(error, CollectionFailed)
    assert {(e.resource, e.reason) for e in error.errors} >= {("resourceclaims", "Timeout")}
    fake.bookmark()  # one of the version now: current again
    watched.settle()
    assert "kube_resourceclaim_info{" in watched.text()


def test_stale_past_the_bound_fails(fake: FakeKubeAPI, clock: Clock) -> None:
    """A watch failing for longer than --max-staleness fails scrapes; before that they go on."""
    watched = synced(fake, clock, staleness=60)
    assert watched.metric("kube_dra_exporter_max_staleness_seconds", {}) == 60
    failing = "kube_dra_exporter_watch_failing_since_timestamp_seconds"
    assert watched.metric(failing, {"resource": "resourceclaims"}) is None
    fake.faults["resourceclaims"] = Fault(403, status(403, "Forbidden", "no"))
    broken_at = clock.seconds()
    fake.close_watches()
    watched.settle()
    assert "kube_resourceclaim" in watched.text()  # the last state, within the bound
    assert watched.metric(failing, {"resource": "resourceclaims"}) == broken_at
    assert watched.metric(failing, {"resource": "resourceslices"}) is None
    clock.advance(61)
    watched.settle()
    failure = watched.failure()
    assert isinstance(failure, CollectionFailed)
    assert [(e.resource, e.reason) for e in failure.errors] == [("resourceclaims", "Forbidden")]
    assert watched.metric(
        "kube_dra_exporter_list_errors_total", {"resource": "resourceclaims", "reason": "Forbidden"}
    )
    del fake.faults["resourceclaims"]
    clock.advance(60)
    watched.settle()
    fake.bookmark()  # the API server sends one about every minute: the state is current again
    watched.settle()
    assert "kube_resourceclaim" in watched.text()
    assert watched.metric(failing, {"resource": "resourceclaims"}) is None


def test_bookmarks_of_an_older_version_keep_nothing_fresh(fake: FakeKubeAPI, clock: Clock) -> None:
    """A bookmark older than what was applied says nothing current: the watch goes idle, stale.

    Something replaying old bookmarks (a proxy, a misbehaving server) kept the last state
    served as current for ever, though nothing newer came.  Such a bookmark is ignored, and
    does not move the version back either.
    """
    watched = synced(fake, clock, staleness=10)
    watch = watched.gatherer._watches["resourceclaims"]
    version = watch._version
    assert version is not None and int(version) > 1
    for _ in range(int(IDLE) // 30 + 2):
        clock.advance(30)
        fake.bookmark(int(version) - 1)
        watched.settle()
    stale_until_a_bookmark_of_now(watched, watch, version, fake)


def test_accepted_then_broken_at_once_goes_stale(fake: FakeKubeAPI, clock: Clock) -> None:
    """Staleness runs from the last event or bookmark applied, not from the last 200.

    Every watch is accepted and breaks at its first event (an object the decoder refuses):
    past --max-staleness scrapes fail, and the deleted slice is not served as current.
    """
    watched = synced(fake, clock, staleness=10)
    fake.close_watches()
    fake.change("resourceslices", "ADDED", {"metadata": {"name": "odd"}, "spec": "not a spec"})
    for _ in range(30):
        clock.advance(1)
        watched.settle()
    failure = watched.failure()
    assert isinstance(failure, CollectionFailed)
    assert [(e.resource, e.reason) for e in failure.errors] == [("resourceslices", "Decode")]


def test_410_on_every_relist_backs_off_and_goes_stale(fake: FakeKubeAPI, clock: Clock) -> None:
    """A 410 while listing again is a failure: backed off, counted, stale past the bound."""
    watched = synced(fake, clock, staleness=10)
    fake.faults["resourceclaims"] = Fault(410, status(410, "Expired", "too old"))
    fake.close_watches()
    before = len(fake.requests)
    for _ in range(30):
        clock.advance(1)
        watched.settle()
    assert len(fake.requests) - before <= 8, "1, 2, 4, 8, 16 s apart: not a hot loop"
    assert watched.metric(
        "kube_dra_exporter_list_errors_total", {"resource": "resourceclaims", "reason": "Expired"}
    )
    assert isinstance(watched.failure(), CollectionFailed)


def test_a_version_refused_again_and_again_is_listed_again(fake: FakeKubeAPI, clock: Clock) -> None:
    """A watch refused three times from one version lists the kind again, from a fresh one."""
    watched = synced(fake, clock)
    fake.faults["resourceclaims"] = Fault(
        400, status(400, "BadRequest", "invalid resourceVersion"), times=3
    )
    fake.close_watches()
    for _ in range(20):
        clock.advance(1)
        watched.settle()
    assert (
        watched.metric(
            "kube_dra_exporter_watch_relists_total",
            {"resource": "resourceclaims", "cause": "refused"},
        )
        == 1
    )
    fake.change("resourceclaims", "ADDED", claim("after"))
    watched.settle()
    assert 'resourceclaim_name="after"' in watched.text()


def test_readyz_names_what_each_resource_waits_for(fake: FakeKubeAPI, clock: Clock) -> None:
    """Not ready: one line per resource, with the failure that holds it back when there is one."""
    seed(fake)
    fake.faults["deviceclasses"] = Fault(403, status(403, "Forbidden", "cannot watch"))
    watched = Watched(fake, clock)
    ready: Any = StubTreq(ExporterApp(watched.gatherer, clock).app.resource())  # untyped methods
    watched.gatherer.start()
    watched.settle()
    response = result_of(ready.get("http://exporter/readyz"))
    assert response.code == 503
    assert result_of(response.text()).splitlines() == [
        "deviceclasses not synchronised yet (watch deviceclasses failed: 403 Forbidden)",
        "resourceclaims not synchronised yet (waiting for deviceclasses first)",
        "resourceslices not synchronised yet (waiting for deviceclasses first)",
    ]
    for resource in ("deviceclasses", "resourceclaims", "resourceslices"):
        assert watched.metric("kube_dra_exporter_watch_synced", {"resource": resource}) == 0
    del fake.faults["deviceclasses"]
    clock.advance(60)
    watched.settle()
    response = result_of(ready.get("http://exporter/readyz"))
    assert (response.code, result_of(response.text())) == (200, "ok\n")


def test_events_not_applied_show_as_lag_and_in_readyz(fake: FakeKubeAPI, clock: Clock) -> None:
    """Events waiting to be applied (matching slow, a scrape reading): lag, count and /readyz.

    The failure, if it comes to one, counts from the last event applied, not the last arrived.
    """
    seed(fake)
    watched = Watched(fake, clock)
    ready: Any = StubTreq(ExporterApp(watched.gatherer, clock).app.resource())  # untyped methods
    watched.gatherer.start()
    watched.settle()
    lane = watched.gatherer._watches["resourceclaims"].lane
    Deferred.fromCoroutine(lane.hold())  # as a slow piece of work would
    for n in range(3):
        fake.change("resourceclaims", "ADDED", claim(f"late-{n}"))
    watched.settle()
    clock.advance(42)
    labels = {"resource": "resourceclaims"}
    assert watched.metric("kube_dra_exporter_watch_lag_seconds", labels) == 42
    assert watched.metric("kube_dra_exporter_watch_events_waiting", labels) == 3
    response = result_of(ready.get("http://exporter/readyz"))
    assert (response.code, result_of(response.text())) == (
        200,
        "ok\nresourceclaims: applying its events 42s behind (3 waiting)\n",
    )
    lane.release()
    watched.settle()
    assert watched.metric("kube_dra_exporter_watch_lag_seconds", labels) == 0
    assert all(f'resourceclaim_name="late-{n}"' in watched.text() for n in range(3))


def test_events_past_the_bound_are_dropped_and_sent_again(
    fake: FakeKubeAPI, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Too much waiting to be applied: dropped, the failure said, the watch resumed.

    It resumes from the last event applied, and every event is applied in the end: the server
    sends the dropped ones again.
    """
    from kdraexp.sources import watch

    watched = synced(fake, clock)
    kind = watched.gatherer._watches["resourceclaims"]
    monkeypatch.setattr(watch, "BEHIND", 3 * len(json.dumps(claim("late-0"))) + 200)
    Deferred.fromCoroutine(kind.lane.hold())
    for n in range(6):
        fake.change("resourceclaims", "ADDED", claim(f"late-{n}"))
    watched.settle()
    assert kind.error is not None and "behind" in kind.error.message
    assert watched.metric(
        "kube_dra_exporter_list_errors_total", {"resource": "resourceclaims", "reason": "Timeout"}
    )
    kind.lane.release()
    clock.advance(BACKOFF[0])
    watched.settle()
    text = watched.text()
    assert all(f'resourceclaim_name="late-{n}"' in text for n in range(6))
    assert kind.error is None


def test_rbac_without_watch_is_said(fake: FakeKubeAPI, clock: Clock) -> None:
    """A 403 on the watch: the scrape stays 503 and the reason is counted and logged."""
    seed(fake)
    fake.faults["deviceclasses"] = Fault(403, status(403, "Forbidden", "cannot watch"))
    watched = Watched(fake, clock)
    watched.gatherer.start()
    watched.settle()
    waiting = watched.failure()
    assert isinstance(waiting, NotSynced)
    refused = waiting.waiting["deviceclasses"]
    assert isinstance(refused, ListError) and (refused.code, refused.reason) == (403, "Forbidden")
    assert watched.metric(
        "kube_dra_exporter_list_errors_total", {"resource": "deviceclasses", "reason": "Forbidden"}
    )


def test_an_object_of_another_kind_is_not_exported(fake: FakeKubeAPI, clock: Clock) -> None:
    """A Pod sent on the slices watch breaks that watch (Decode); it is never a slice."""
    watched = synced(fake, clock, staleness=10)
    intruder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"}}
    fake.change("resourceslices", "ADDED", intruder)
    watched.settle()
    assert 'resourceslice_name="intruder"' not in watched.text()
    assert watched.metric(
        "kube_dra_exporter_list_errors_total", {"resource": "resourceslices", "reason": "Decode"}
    )
    for _ in range(15):
        clock.advance(1)
        watched.settle()
    failure = failure_of(watched.gatherer.gather()).value
    assert isinstance(failure, CollectionFailed)
    assert [(e.resource, e.reason) for e in failure.errors] == [("resourceslices", "Decode")]


def test_an_invented_event_type_is_refused(fake: FakeKubeAPI, clock: Clock) -> None:
    """An event type no API server sends ends the watch; no label takes its value."""
    watched = synced(fake, clock)
    invented = "X" * 205
    fake.change("resourceclaims", invented, {"metadata": {"name": "odd"}})
    watched.settle()
    assert watched.metric(
        "kube_dra_exporter_list_errors_total", {"resource": "resourceclaims", "reason": "Decode"}
    )
    exposition = registry(watched.stats, watched.collections)
    types = {
        sample.labels.get("type")
        for family in exposition.collect()
        for sample in family.samples
        if family.name == "kube_dra_exporter_watch_events"
    }
    assert types <= {"ADDED", "MODIFIED", "DELETED", "BOOKMARK"}


def taint_rule(name: str, effect: str, key: str = "maintenance") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"deviceSelector": {"pool": "pool"}, "taint": {"key": key, "effect": effect}},
    }


def taint_lines(text: str) -> list[str]:
    """The device taint rows and the claims' tainted results."""
    return [
        line
        for line in text.splitlines()
        if line.startswith(
            ("kube_resourceslice_device_taint{", "kube_resourceclaim_allocation_tainted{")
        )
    ]


def test_taint_rule_changes_change_the_taints(fake: FakeKubeAPI, clock: Clock) -> None:
    """A DeviceTaintRule added, changed, deleted: the device's taints and its holder's follow."""
    seed(fake)
    resources = "resourceclaims,resourceslices,deviceclasses,devicetaintrules"
    watched = Watched(fake, clock, selection=select(resources=resources))
    watched.gatherer.start()
    watched.settle()
    before = watched.text()
    assert taint_lines(before) == []
    watched.fake.change("devicetaintrules", "ADDED", taint_rule("drain", "NoExecute"))
    watched.settle()
    added = taint_lines(watched.text())
    assert len(added) == 2
    assert all('devicetaintrule="drain"' in line for line in added)
    assert all('effect="NoExecute"' in line for line in added)
    assert 'tolerated="false"' in added[0] + added[1]
    watched.fake.change("devicetaintrules", "MODIFIED", taint_rule("drain", "NoSchedule", "fyi"))
    watched.settle()
    changed = taint_lines(watched.text())
    assert len(changed) == 2
    assert all('key="fyi"' in line and 'effect="NoSchedule"' in line for line in changed)
    watched.fake.change("devicetaintrules", "DELETED", taint_rule("drain", "NoSchedule", "fyi"))
    watched.settle()
    assert watched.text() == before


def test_unread_values_counted_as_applied_and_logged_once(watched: Watched) -> None:
    """A bad hourly-cost: counted at the sync, again at each event that applies it, logged once.

    Gone (fixed, then deleted), it is logged again when it comes back; list_objects follows.
    """
    from twisted.logger import capturedLogs

    invalid = {"resource": "deviceclasses", "field": "hourly-cost"}
    objects = {"resource": "deviceclasses"}
    counted = "kube_dra_exporter_invalid_values_total"
    watched.fake.add("deviceclasses", device_class("bad", "1,5"))
    with capturedLogs() as events:
        watched.gatherer.start()
        watched.settle()
        assert watched.metric(counted, invalid) == 1
        assert watched.metric("kube_dra_exporter_list_objects", objects) == 2
        for _ in range(3):  # scrapes read nothing: nothing is counted again
            watched.text()
        assert watched.metric(counted, invalid) == 1
        watched.fake.change("deviceclasses", "MODIFIED", device_class("bad", "2,5"))
        watched.settle()
        assert watched.metric(counted, invalid) == 2
        watched.fake.change("deviceclasses", "MODIFIED", device_class("bad", "2.5"))
        watched.settle()
        assert watched.metric(counted, invalid) == 2
        watched.fake.change("deviceclasses", "ADDED", device_class("worse", "x"))
        watched.settle()
        assert watched.metric(counted, invalid) == 3
        assert watched.metric("kube_dra_exporter_list_objects", objects) == 3
        watched.fake.change("deviceclasses", "DELETED", device_class("worse", "x"))
        watched.settle()
        assert watched.metric("kube_dra_exporter_list_objects", objects) == 2
        watched.fake.change("deviceclasses", "ADDED", device_class("worse", "x"))
        watched.settle()
    lines = [e["problem"] for e in events if "hourly-cost" in str(e.get("problem", ""))]
    assert lines == [
        "Error parsing 'hourly-cost' (1,5) on DeviceClass bad: "
        "expected a non-negative decimal with a dot separator",
        "Error parsing 'hourly-cost' (2,5) on DeviceClass bad: "
        "expected a non-negative decimal with a dot separator",
        "Error parsing 'hourly-cost' (x) on DeviceClass worse: "
        "expected a non-negative decimal with a dot separator",
        "Error parsing 'hourly-cost' (x) on DeviceClass worse: "
        "expected a non-negative decimal with a dot separator",
    ]


def test_bookmarks_of_no_version_keep_nothing_fresh(fake: FakeKubeAPI, clock: Clock) -> None:
    """A bookmark whose version is not a number is no version: it keeps nothing fresh.

    kube-apiserver makes its versions of etcd's revisions and refuses a watch from any other;
    such bookmarks, sent every 30 s, kept the last state served as current for ever (and the
    next watch asked from a version the server would refuse).  They are ignored.
    """
    watched = synced(fake, clock, staleness=10)
    watch = watched.gatherer._watches["resourceclaims"]
    version = watch._version
    for count in range(int(IDLE) // 30 + 2):
        clock.advance(30)
        for open_watch in list(fake.watches):
            bookmark = {"kind": "ResourceClaim", "metadata": {"resourceVersion": f"v{count}"}}
            open_watch.send("BOOKMARK", bookmark)
        watched.settle()
    stale_until_a_bookmark_of_now(watched, watch, version, fake)


def test_a_watch_dropped_mid_stream_counts_as_restarted(watched: Watched) -> None:
    """The API server crashing (the connection dropped mid-stream) interrupts a watch: counted.

    kube_dra_exporter_watch_restarts_total counted idle spells only: a server that crashed
    again and again left it at 0.  A watch the server ends at its timeoutSeconds is no
    interruption, and a 410 is a re-list, counted as one.
    """
    restarts = {"resource": "resourceclaims"}
    watched.gatherer.start()
    watched.settle()
    watched.clock.advance(5)
    watched.fake.close_watches()
    watched.settle()
    assert not watched.metric("kube_dra_exporter_watch_restarts_total", restarts)
    watched.clock.advance(5)
    watches = watch_requests(watched)
    watched.fake.drop_watches()
    watched.settle()
    assert watched.metric("kube_dra_exporter_watch_restarts_total", restarts) == 1
    watched.clock.advance(BACKOFF[0])
    watched.settle()
    assert watch_requests(watched) > watches
    assert "kube_resourceclaim_info{" in watched.text()


def test_memory_stays_flat_while_a_resource_never_synchronises(
    fake: FakeKubeAPI, clock: Clock
) -> None:
    """Claims come and go while pods never synchronise (not served here; RBAC refuses them).

    No scrape makes a snapshot then (each answers 503), and the claims' reader kept every key
    its events touched until one would: 0.33 MiB for each 3,000 claims, without end.  What
    the exporter's own code holds after each round of new claims now stays flat.
    """
    seed(fake)
    selection = select(resources="resourceclaims,resourceslices,deviceclasses,pods")
    watched = Watched(fake, clock, selection=selection)
    watched.gatherer.start()
    watched.settle()
    assert list(watched.gatherer.not_synced()) == ["pods"]
    held = []
    tracemalloc.start()
    try:
        for round_ in range(6):
            names = [f"r{round_}-{n}" for n in range(200)]
            for name in names:
                fake.change("resourceclaims", "ADDED", claim(name))
            watched.settle()
            for name in names:
                fake.change("resourceclaims", "DELETED", claim(name))
            watched.settle()
            fake.history.clear()  # the fake's own memory, not the exporter's
            gc.collect()
            mine = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(True, "*/kdraexp/*")]
            )
            held.append(sum(stat.size for stat in mine.statistics("filename")))
    finally:
        tracemalloc.stop()
    assert watched.gatherer.not_synced().keys() == {"pods"}
    assert held[-1] - held[1] < 4 * 2**10, held


def test_a_lone_surrogate_in_an_event_costs_a_value_not_the_watch(watched: Watched) -> None:
    """An event whose object holds a lone surrogate is applied, its value counted.

    The event could not be decoded at all: the watch broke at it, again at every retry.
    """
    watched.gatherer.start()
    watched.settle()
    odd = claim("odd")
    odd["metadata"]["labels"] = {"team": "\ud800"}
    watched.fake.change("resourceclaims", "ADDED", odd)
    watched.settle()
    assert 'resourceclaim_name="odd"' in watched.text()
    assert watched.gatherer._watches["resourceclaims"].error is None
    invalid = {"resource": "resourceclaims", "field": "json"}
    assert watched.metric("kube_dra_exporter_invalid_values_total", invalid) == 1


def test_a_full_list_logs_one_line_for_a_field_every_object_lacks(
    fake: FakeKubeAPI, clock: Clock
) -> None:
    """200 claims without creationTimestamp synchronised: one line for them, each counted.

    (The seed's claim lacks one too: 201.)
    """
    from twisted.logger import capturedLogs

    seed(fake)
    for n in range(200):
        fake.add("resourceclaims", claim(f"undated-{n}"))
    watched = Watched(fake, clock)
    with capturedLogs() as events:
        watched.gatherer.start()
        watched.settle()
    lines = [e for e in events if "ResourceClaim " in str(e.get("problem", ""))]
    assert len(lines) == 1 and lines[0]["count"] == 201, lines
    counted = {"resource": "resourceclaims", "field": "metadata.creationTimestamp"}
    assert watched.metric("kube_dra_exporter_invalid_values_total", counted) == 201


def test_doing_names_the_kinds_not_synchronised_then_events(watched: Watched) -> None:
    """What a slow turn of the reactor is logged with in watch mode."""
    assert watched.gatherer.doing == (
        "listing and reading deviceclasses, resourceslices, resourceclaims"
    )
    watched.gatherer.start()
    watched.settle()
    assert watched.gatherer.doing == "applying the watches' events"
