"""Upstream's DRA scale job as the benchmark's fake API plays it (benchmarks.jobs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.cluster import cluster
from benchmarks.fakeapi import Pages
from benchmarks.jobs import FILL, JOB_SECONDS, ScaleJob


class Horizon(Exception):
    """The fake clock passed the time the test looks at."""


def _state(claim: dict[str, Any]) -> str:
    status = claim.get("status") or {}
    if status.get("reservedFor"):
        return "reserved"
    return "allocated" if status.get("allocation") else "pending"


def _played(nodes: int, rate: float, churn: float, seconds: float) -> tuple[ScaleJob, list[Any]]:
    """The job on *nodes* nodes for *seconds* of a fake clock, and every change it made."""
    now = [0.0]
    changes: list[tuple[str, str, str, Any]] = []

    def change(plural: str, event: str, claim: dict[str, Any]) -> float:
        assert plural == "resourceclaims"
        results = (claim.get("status") or {}).get("allocation", {}).get("devices", {})
        device = [(r["pool"], r["device"]) for r in results.get("results", [])]
        changes.append((event, claim["metadata"]["name"], _state(claim), device))
        return now[0]

    def sleep(seconds_: float) -> None:
        now[0] += seconds_
        if now[0] > seconds:
            raise Horizon

    job = ScaleJob(
        change,
        cluster(nodes, claims=False)["resourceslices"],
        rate,
        churn,
        clock=lambda: now[0],
        sleep=sleep,
    )
    with pytest.raises(Horizon):
        job.run()
    return job, changes


def test_the_fill_takes_nine_devices_in_ten_each_claim_created_allocated_reserved() -> None:
    job, changes = _played(nodes=10, rate=10, churn=1, seconds=80 * 0.1 + 1)
    assert job.fill == int(FILL * 80) == 72
    assert job.filled and job.created == 72
    long = [c for c in changes if c[1].startswith("long-")]
    lives: dict[str, list[tuple[str, str]]] = {}
    for event, name, state, _ in long:
        lives.setdefault(name, []).append((event, state))
    assert len(lives) == 72
    assert set(map(tuple, lives.values())) == {
        (("ADDED", "pending"), ("MODIFIED", "allocated"), ("MODIFIED", "reserved"))
    }
    devices = [device[0] for _, _, state, device in long if state == "reserved"]
    assert len(set(devices)) == 72, "a device given twice"
    assert len({pool for pool, _ in devices}) == 10, "the jobs spread over every node"


def test_short_jobs_live_thirty_seconds_then_are_released_and_deleted() -> None:
    job, changes = _played(nodes=100, rate=1000, churn=2, seconds=0.72 + JOB_SECONDS + 5)
    first = [(event, state) for event, name, state, _ in changes if name == "short-000000"]
    assert first == [
        ("ADDED", "pending"),
        ("MODIFIED", "allocated"),
        ("MODIFIED", "reserved"),
        ("MODIFIED", "pending"),
        ("DELETED", "pending"),
    ]
    assert job.short == 70 and job.waiting == 0
    live, most = set(), 0
    for event, name, state, _ in changes:
        if name.startswith("short-"):
            if event == "ADDED":
                live.add(name)
            elif state == "pending" and event == "MODIFIED":
                live.discard(name)
            most = max(most, len(live))
    assert most == 61, "two jobs a second, each held 30.1 s from its creation to its release"


def test_short_jobs_wait_for_a_free_device() -> None:
    job, changes = _played(nodes=1, rate=100, churn=2, seconds=10)
    assert job.fill == 7
    assert job.short == 0, "the one device left free is the probes'"
    assert not [change for change in changes if change[1].startswith("short-")]
    assert job.waiting > 0
    assert job.step("probe", "created") >= 0


def test_a_deleted_claim_leaves_the_fake_apis_lists() -> None:
    pages = Pages(1, claims=False)
    job = ScaleJob(pages.change, pages.objects["resourceslices"], 1, 1)
    for name in ("a", "b"):
        job.step(name, "created")
    job.step("a", "allocated")
    job.step("a", "released")
    job.step("a", "deleted")
    job.step("b", "allocated")
    listed = json.loads(pages.page("resourceclaims", 0, 500))["items"]
    assert [(c["metadata"]["name"], _state(c)) for c in listed] == [("b", "allocated")]
    assert [line.split(b'"')[3] for _, _, line in pages.events] == [
        b"ADDED",
        b"ADDED",
        b"MODIFIED",
        b"MODIFIED",
        b"DELETED",
        b"MODIFIED",
    ]
