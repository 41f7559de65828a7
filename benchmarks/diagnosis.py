"""What the pending reasons and headroom cost: one cluster with pending claims and without.

The cluster of ``make bench`` at one size, then the same with PENDING pending claims spread over
the reasons (benchmarks.cluster.PENDING): the collection made at start (every object new) and
calm list-mode scrapes and peak RSS of each,
and calm watch-mode scrapes of the second.  A third exporter reads the second cluster without
the families an operator acts on (:data:`ANSWERS`: idle cost, tainted allocations, device
taints, headroom), so that what they cost together shows beside the rest (each alone is held to
5% by :mod:`benchmarks.familycost`, where a first collection's noise does not hide it).  First
collections are measured FIRSTS times, alternately, each by an exporter of its own started for
it; their CPU seconds are compared by the fastest of each.  Calm scrapes of the three are taken
in turn.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import Run, get

PENDING = 1000
ANSWERS = (
    "kube_resourcepool_idle_hourly_cost",
    "kube_resourceclaim_allocation_tainted",
    "kube_resourceslice_device_taint",
    "kube_resourcepool_allocatable_devices",
)
"""Families measured by writing them or not (--metric-denylist)."""
FIRSTS = 5
"""Collections made at start measured of each cluster, alternately.

The same first collection's CPU seconds vary by a fifth and more on a shared machine, and only
upwards: what others run slows it, nothing speeds it.  The fastest of each is the cost compared
(as ``timeit`` advises); the medians are printed beside them.
"""


def _first(run: Run) -> tuple[float, float]:
    """Seconds and CPU seconds of the collection made at start, in which everything is new."""
    return run.start_seconds, run.start_cpu


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices.

    The two clusters' scrapes are taken in turn (first collections in the order ABBA...): the
    machine's speed drifts over a run, and it should weigh on both alike.
    """
    runs: list[Run] = []
    try:
        plain = Run(devices, directory / "plain", [])
        runs.append(plain)
        pending = Run(devices, directory / "pending", [], pending=PENDING)
        runs.append(pending)
        denied = ["--metric-denylist", ",".join(f"^{name}$" for name in ANSWERS)]
        without = Run(devices, directory / "without", denied, api=pending)
        runs.append(without)
        plain_firsts, pending_firsts = [_first(plain)], [_first(pending)]
        without_firsts = [_first(without)]
        plain_calm, pending_calm, without_calm = [], [], []
        for _ in range(scrapes):
            plain_calm.append(plain.scrape())
            pending_calm.append(pending.scrape())
            without_calm.append(without.scrape())
        plain_rss, pending_rss = plain.peak_rss(), pending.peak_rss()
        reasons = get(pending.port, "/metrics")[1].count(b"kube_resourceclaim_pending_reason{")
        for again in range(1, FIRSTS):
            turn = [
                (plain, plain_firsts, []),
                (pending, pending_firsts, []),
                (pending, without_firsts, denied),
            ]
            for api, firsts, args in turn if again % 2 == 0 else turn[::-1]:
                fresh = Run(devices, directory / f"first-{again}", args, api=api)
                try:
                    firsts.append(_first(fresh))
                finally:
                    fresh.stop()
        watching = Run(devices, directory / "watch", ["--mode", "watch"], api=pending)
        runs.append(watching)
        while get(watching.port, "/readyz")[0] != 200:
            time.sleep(0.02)
        watching.scrape()
        watch_calm = [watching.scrape() for _ in range(scrapes)]
    finally:
        for run in reversed(runs):
            run.stop()
    return {
        "devices": devices,
        "pending": PENDING,
        "pending_reason_series": reasons,
        "list_first": statistics.median(t for t, _ in plain_firsts),
        "list_first_cpu": statistics.median(c for _, c in plain_firsts),
        "list_first_cpu_fastest": min(c for _, c in plain_firsts),
        "pending_list_first": statistics.median(t for t, _ in pending_firsts),
        "pending_list_first_cpu": statistics.median(c for _, c in pending_firsts),
        "pending_list_first_cpu_fastest": min(c for _, c in pending_firsts),
        "list_calm_median": statistics.median(plain_calm),
        "list_peak_rss_bytes": plain_rss,
        "pending_list_calm_median": statistics.median(pending_calm),
        "pending_list_peak_rss_bytes": pending_rss,
        "pending_watch_calm_median": statistics.median(watch_calm),
        "without_answers_list_first_cpu_fastest": min(c for _, c in without_firsts),
        "without_answers_list_calm_median": statistics.median(without_calm),
    }


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    mib = 2**20
    return "\n".join(
        [
            f"At {result['devices']:,} devices, with and without {result['pending']:,} pending "
            f"claims ({result['pending_reason_series']:,} pending-reason series):",
            "",
            "| | without | with | with ÷ without |",
            "|---|---:|---:|---:|",
            f"| list mode, calm scrape (s) | {result['list_calm_median']:.3f} | "
            f"{result['pending_list_calm_median']:.3f} | "
            f"{result['pending_list_calm_median'] / result['list_calm_median']:.2f} |",
            f"| list mode, collection at start (s, median of {FIRSTS}) | "
            f"{result['list_first']:.3f} | "
            f"{result['pending_list_first']:.3f} | "
            f"{result['pending_list_first'] / result['list_first']:.2f} |",
            f"| list mode, collection at start, its CPU (s, median of {FIRSTS}) | "
            f"{result['list_first_cpu']:.3f} | {result['pending_list_first_cpu']:.3f} | "
            f"{_ratio(result['pending_list_first_cpu'], result['list_first_cpu'])} |",
            f"| list mode, collection at start, its CPU (s, fastest of {FIRSTS}) | "
            f"{result['list_first_cpu_fastest']:.3f} | "
            f"{result['pending_list_first_cpu_fastest']:.3f} | "
            f"{_ratio(result['pending_list_first_cpu_fastest'], result['list_first_cpu_fastest'])}"
            " |",
            f"| peak RSS (MiB) | {result['list_peak_rss_bytes'] / mib:.0f} | "
            f"{result['pending_list_peak_rss_bytes'] / mib:.0f} | "
            f"{result['pending_list_peak_rss_bytes'] / result['list_peak_rss_bytes']:.2f} |",
            "",
            f"Watch mode with them, calm scrape: {result['pending_watch_calm_median']:.3f} s, "
            f"{result['pending_watch_calm_median'] / result['pending_list_calm_median']:.3f}x "
            "list mode's.",
            "",
            f"With them, the families an operator acts on ({', '.join(ANSWERS)}) cost "
            f"{_share(result, 'list_first_cpu_fastest'):.1%} of the collection at start's CPU "
            f"(fastest of {FIRSTS}) and {_share(result, 'list_calm_median'):.1%} of a calm scrape.",
        ]
    )


def _ratio(part: float, whole: float) -> str:
    """*part* ÷ *whole*, or n/a where *whole* is 0.

    CPU seconds are read in clock ticks (10 ms): a small cluster's collection can take none.
    """
    return f"{part / whole:.2f}" if whole else "n/a"


def _share(result: dict[str, Any], figure: str) -> float:
    """What ANSWERS add to *figure*, as a share of it with them (0 where it took no time)."""
    whole = float(result[f"pending_{figure}"])
    return (whole - float(result[f"without_answers_{figure}"])) / whole if whole else 0.0


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """The diagnosis families' cost targets, and whether each is met."""
    size = f"{result['devices']:,} devices and {result['pending']:,} pending claims"
    return [
        (
            f"{size}: list-mode scrape grows by at most 10%",
            result["pending_list_calm_median"] <= 1.10 * result["list_calm_median"],
        ),
        (
            f"{size}: list mode, the collection at start's CPU (fastest of {FIRSTS}) grows by at "
            "most 10%",
            result["pending_list_first_cpu_fastest"] <= 1.10 * result["list_first_cpu_fastest"],
        ),
        (
            f"{size}: peak RSS grows by at most 10%",
            result["pending_list_peak_rss_bytes"] <= 1.10 * result["list_peak_rss_bytes"],
        ),
        (
            f"{size}: watch mode, calm scrape <= 0.05x list mode's",
            result["pending_watch_calm_median"] <= 0.05 * result["pending_list_calm_median"],
        ),
    ]
