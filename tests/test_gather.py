"""Collections: one set of lists shared by concurrent scrapes, one deadline, cancellation."""

from __future__ import annotations

import json

from twisted.internet.defer import CancelledError
from twisted.internet.task import Clock

from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from kdraexp.sources.protocol import CollectionFailed
from tests.conftest import Exporter, exporter_of, failure_of, has_fired, result_of
from tests.fakeapi import FakeKubeAPI, Fault
from tests.objects import SEED_CLAIM, device_class, new_claim


def test_concurrent_scrapes_share_one_collection(exporter: Exporter) -> None:
    """40 scrapes arriving during one collection cause one list call per resource."""
    exporter.fake.add("deviceclasses", device_class("gpu", "3"))
    exporter.fake.faults["resourceclaims"] = Fault(hang=True)
    responses = [exporter.web.get("http://exporter/metrics") for _ in range(40)]
    assert len(exporter.fake.lists()) == 3
    assert not any(has_fired(d) for d in responses)
    exporter.fake.faults.clear()
    hung = exporter.fake.hanging.pop()
    hung.callback(json.dumps({"items": [SEED_CLAIM]}).encode())
    exporter.settle()
    contents = [result_of(d).content() for d in responses]
    exporter.settle()
    bodies = {result_of(content) for content in contents}
    assert len(bodies) == 1
    body = bodies.pop()
    assert b'kube_deviceclass_hourly_cost{deviceclass_name="gpu"} 3\n' in body
    assert (
        b'kube_resourceclaim_status_reserved_total{namespace="workloads",'
        b'resourceclaim_name="claim"} 1\n' in body
    )
    assert len(exporter.fake.lists()) == 3
    exporter.get("/metrics")
    assert len(exporter.fake.lists()) == 6, "a later scrape lists again"


def test_classes_are_listed_first(exporter: Exporter) -> None:
    """Slices and claims are listed once the classes are in, and in parallel with each other."""
    exporter.fake.faults["deviceclasses"] = Fault(hang=True)
    response = exporter.web.get("http://exporter/metrics")
    assert [r.plural for r in exporter.fake.lists()] == ["deviceclasses"]
    exporter.fake.faults.clear()
    exporter.fake.hanging.pop().callback(b'{"items": []}')
    exporter.settle()
    assert sorted(r.plural for r in exporter.fake.lists()[1:]) == [
        "resourceclaims",
        "resourceslices",
    ]
    assert result_of(response).code == 200


def test_deadline_spans_the_collection(exporter: Exporter) -> None:
    """One deadline for the whole collection: classes' time counts against the later lists."""
    exporter.fake.faults["deviceclasses"] = Fault(hang=True)
    response = exporter.web.get("http://exporter/metrics")
    exporter.clock.advance(6)
    exporter.fake.faults = {"resourceslices": Fault(hang=True)}
    exporter.fake.hanging.pop().callback(b'{"items": []}')
    exporter.agent.flush()
    exporter.clock.advance(3.9)
    assert not has_fired(response)
    exporter.clock.advance(0.1)
    exporter.settle()
    answer = result_of(response)
    assert answer.code == 500
    assert result_of(answer.content()) == (
        b"list resourceslices failed: Timeout: not complete within 10s\n"
    )


def test_deadline_cancels_in_flight_lists(exporter: Exporter) -> None:
    """A list that outlasts the timeout fails the scrape with Timeout and is cancelled."""
    exporter.fake.add("deviceclasses", device_class("gpu", "1"))
    exporter.fake.faults["resourceslices"] = Fault(hang=True)
    response = exporter.web.get("http://exporter/metrics")
    exporter.clock.advance(9.9)
    assert not has_fired(response)
    assert exporter.get("/healthz")[0] == 200
    exporter.clock.advance(0.1)
    exporter.settle()
    answer = result_of(response)
    assert answer.code == 500
    assert (
        result_of(answer.content())
        == b"list resourceslices failed: Timeout: not complete within 10s\n"
    )
    assert exporter.fake.hanging[0].called, "the hanging request was cancelled"


def test_deadline_counts_timeouts(exporter: Exporter) -> None:
    """Timeouts are counted by reason Timeout."""
    exporter.fake.faults["resourceclaims"] = Fault(hang=True, times=1)
    pending = exporter.gatherer.gather()
    exporter.clock.advance(10)
    assert isinstance(failure_of(pending).value, CollectionFailed)
    _, _, body = exporter.get("/metrics", telemetry=True)
    assert (
        b'kube_dra_exporter_list_errors_total{reason="Timeout",resource="resourceclaims"} 1.0'
        in body
    )


def test_last_waiter_leaving_cancels_collection(exporter: Exporter) -> None:
    """When every scrape waiting on a collection goes away, its list calls are cancelled."""
    exporter.fake.faults["resourceclaims"] = Fault(hang=True)
    first, second = exporter.gatherer.gather(), exporter.gatherer.gather()
    first.cancel()
    assert not exporter.fake.hanging[0].called
    assert exporter.gatherer.running
    second.cancel()
    exporter.agent.flush()
    assert exporter.fake.hanging[0].called
    assert not exporter.gatherer.running
    failure_of(first).trap(CancelledError)
    failure_of(second).trap(CancelledError)


def test_invalid_cost_logged_once(exporter: Exporter) -> None:
    """An invalid hourly-cost is omitted, and logged once while it lasts, not at every scrape."""
    from twisted.logger import capturedLogs

    exporter.fake.add("deviceclasses", device_class("invalid", "NaN"))
    exporter.fake.add("deviceclasses", device_class("valid", "3.25"))
    with capturedLogs() as events:
        for _ in range(3):
            code, _, body = exporter.get("/metrics")
            assert code == 200
    assert b'kube_deviceclass_hourly_cost{deviceclass_name="valid"} 3.25\n' in body
    assert b'kube_deviceclass_hourly_cost{deviceclass_name="invalid"' not in body
    assert b'kube_deviceclass_info{deviceclass_name="invalid",' in body
    _, _, body = exporter.get("/metrics", telemetry=True)
    assert (
        b'kube_dra_exporter_invalid_values_total{field="hourly-cost",resource="deviceclasses"} 3.0'
        in body
    )
    warnings = [e for e in events if "hourly-cost" in str(e.get("problem", ""))]
    assert len(warnings) == 1
    assert warnings[0]["problem"] == (
        "Error parsing 'hourly-cost' (NaN) on DeviceClass invalid: "
        "expected a non-negative decimal with a dot separator"
    )


def test_values_cut_short_counted_apart_and_logged_once(fake: FakeKubeAPI, clock: Clock) -> None:
    """Each scrape counts each value it writes cut short; one line says so while it lasts.

    Counted apart from the values left out: a value cut short is still written.
    """
    from twisted.logger import capturedLogs

    exporter = exporter_of(
        fake,
        clock,
        select(
            options=FamilyOptions.from_flags({"metric-annotations-allowlist": "resourceclaims=[*]"})
        ),
    )
    for n in range(2):
        fake.add("resourceclaims", new_claim(f"c{n}", annotations={"notes": "x" * 1000}))
    with capturedLogs() as events:
        for _ in range(3):
            code, _, body = exporter.get("/metrics")
            assert code == 200
    assert b'annotation_notes="' + b"x" * 253 + b'..."' in body
    _, _, own = exporter.get("/metrics", telemetry=True)
    assert (
        b'kube_dra_exporter_truncated_values_total{field="metadata.annotations",'
        b'resource="resourceclaims"} 6.0' in own
    )
    assert b"kube_dra_exporter_invalid_values_total{" not in own
    warnings = [str(e["problem"]) for e in events if "problem" in e]
    assert warnings == [
        "ResourceClaim annotations notes: values longer than 256 characters are written cut "
        "short, ending in ..."
    ]


def test_doing_names_the_phase_of_the_collection(exporter: Exporter) -> None:
    """What a slow turn of the reactor is logged with: the kinds being listed, or nothing."""
    from kdraexp.sources.gather import IDLE

    assert exporter.gatherer.doing == IDLE
    exporter.fake.faults["deviceclasses"] = Fault(hang=True)
    pending = exporter.gatherer.gather()
    assert exporter.gatherer.doing == "listing and reading deviceclasses"
    exporter.fake.faults = {"resourceclaims": Fault(hang=True)}
    exporter.fake.hanging.pop().callback(b'{"items": []}')
    exporter.settle()
    assert exporter.gatherer.doing == "listing and reading resourceslices, resourceclaims"
    exporter.clock.advance(10)
    assert isinstance(failure_of(pending).value, CollectionFailed)
    assert exporter.gatherer.doing == IDLE
