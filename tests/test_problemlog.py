"""Problems of one kind are logged in one line: how many, and the first few."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import capturedLogs

from kdraexp.dra.problems import Problem
from kdraexp.sources.problemlog import STEP, ProblemLog
from kdraexp.telemetry.selfmetrics import CollectionStats, registry
from kdraexp.util.turns import Turns

INVALID = "kube_dra_exporter_invalid_values_total"
CREATED = {"resource": "resourceclaims", "field": "metadata.creationTimestamp"}


def undated(count: int) -> list[Problem]:
    """Claims without creationTimestamp, as the families report them."""
    return [
        Problem(
            "resourceclaims",
            "metadata.creationTimestamp",
            f"ResourceClaim workloads/c{n} creationTimestamp: no timestamp",
        )
        for n in range(count)
    ]


def messages(events: Sequence[dict[str, Any]]) -> list[str]:
    return [str(e["log_format"]).format(**e) for e in events]


def test_32000_problems_of_one_kind_are_one_line_each_counted() -> None:
    """One odd field on 32,000 claims: one line naming three and the count; every one counted."""
    stats = CollectionStats()
    problems = ProblemLog(stats)
    with capturedLogs() as events:
        problems.read("collection", undated(32_000), {})
        problems.read("collection", undated(32_000), {})  # the next collection: nothing new
    assert messages(events) == [
        "32000 problems with resourceclaims metadata.creationTimestamp, each logged once while"
        " it lasts: ResourceClaim workloads/c0 creationTimestamp: no timestamp; ResourceClaim"
        " workloads/c1 creationTimestamp: no timestamp; ResourceClaim workloads/c2"
        " creationTimestamp: no timestamp; and 31997 more"
    ]
    assert registry(stats).get_sample_value(INVALID, CREATED) == 64_000


class Counted(Turns):
    """Turns that never yield, counting the looks at the clock they are asked for."""

    def __init__(self) -> None:
        super().__init__(None)
        self.looks = 0

    async def take(self) -> None:
        self.looks += 1


def test_a_collection_of_32000_problems_is_read_in_turns() -> None:
    """A collection's 32,000 problems are read a few hundred at a time; the same outcome.

    Between two looks at the clock (where the reactor gets a turn once 10 ms have passed,
    :mod:`kdraexp.util.turns`) at most :data:`~kdraexp.sources.problemlog.STEP` problems are
    read, and as many held: 32 ms in one turn before, at 64,000 devices.
    """
    stats = CollectionStats()
    problems = ProblemLog(stats)
    with capturedLogs() as events:
        for _ in range(2):  # the next collection: nothing new to log
            turns = Counted()
            reading = Deferred.fromCoroutine(
                problems.read_in_turns("collection", undated(32_000), {}, turns)
            )
            assert reading.called
            assert turns.looks >= 2 * 32_000 // STEP
    assert [e["count"] for e in events] == [32_000]
    assert registry(stats).get_sample_value(INVALID, CREATED) == 64_000
    problems.forget("collection")
    with capturedLogs() as events:
        problems.read("collection", undated(1), {})
    assert len(events) == 1, "the problem went with its source, and is new again"


def test_one_line_per_kind_and_a_lone_problem_as_it_was() -> None:
    """Kinds apart: one line each; a kind with one new problem is that problem's line."""
    problems = ProblemLog(CollectionStats())
    cost = Problem("deviceclasses", "hourly-cost", "DeviceClass gpu hourly-cost: not a decimal")
    with capturedLogs() as events:
        problems.read("collection", [*undated(2), cost], {"gpu": (4, "no such attribute")})
    assert messages(events) == [
        "DeviceClass gpu hourly-cost: not a decimal (logged once while it lasts)",
        "DeviceClass gpu: no such attribute (logged once while it lasts)",
        "2 problems with resourceclaims metadata.creationTimestamp, each logged once while it"
        " lasts: ResourceClaim workloads/c0 creationTimestamp: no timestamp; ResourceClaim"
        " workloads/c1 creationTimestamp: no timestamp",
    ]


def test_a_batch_of_sources_is_summarised_and_a_problem_gone_is_new_again() -> None:
    """Objects read one by one within a batch (a watch's full list): one line for all of them.

    Once every object that had a problem changed or went, it is new again when it comes back.
    """
    problems = ProblemLog(CollectionStats())
    with capturedLogs() as events:
        with problems.batch():
            for problem in undated(1000):
                problems.read(problem.message, [problem], {})
        assert len(events) == 1 and str(events[0]["count"]) == "1000"
        lone = undated(1)
        problems.read("again", lone, {})  # another object with the same problem: held already
        problems.forget(lone[0].message)
        problems.forget("again")
        problems.read("back", lone, {})
    assert messages(events)[1:] == [
        "ResourceClaim workloads/c0 creationTimestamp: no timestamp (logged once while it lasts)"
    ]
