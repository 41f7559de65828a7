"""What the pending reasons and headroom cost: one cluster with pending claims and without.

The cluster of ``make bench`` at one size, then the same with PENDING pending claims spread over
the reasons (benchmarks.cluster.PENDING): first and calm list-mode scrapes and peak RSS of each,
and calm watch-mode scrapes of the second.  First scrapes are measured FIRSTS times, alternately,
each by an exporter of its own.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.run import Run, get

PENDING = 1000
FIRSTS = 3
"""First scrapes measured of each cluster, alternately: one of each varies by a fifth here."""


def _calm(run: Run, scrapes: int) -> tuple[tuple[float, float], list[float]]:
    """The first scrape (everything read and judged), then calm ones (nothing changed)."""
    return _first(run), [run.scrape() for _ in range(scrapes)]


def _first(run: Run) -> tuple[float, float]:
    """Seconds and CPU seconds of a scrape in which everything is new."""
    cpu = run.cpu()
    elapsed = run.scrape()
    return elapsed, run.cpu() - cpu


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices."""
    runs: list[Run] = []
    try:
        plain = Run(devices, directory / "plain", [])
        runs.append(plain)
        plain_first, plain_calm = _calm(plain, scrapes)
        plain_rss = plain.peak_rss()
        pending = Run(devices, directory / "pending", [], pending=PENDING)
        runs.append(pending)
        pending_first, pending_calm = _calm(pending, scrapes)
        pending_rss = pending.peak_rss()
        reasons = get(pending.port, "/metrics")[1].count(b"kube_resourceclaim_pending_reason{")
        plain_firsts, pending_firsts = [plain_first], [pending_first]
        for again in range(1, FIRSTS):
            for api, firsts in ((plain, plain_firsts), (pending, pending_firsts)):
                fresh = Run(devices, directory / f"first-{again}", [], api=api)
                try:
                    firsts.append(_first(fresh))
                finally:
                    fresh.stop()
        watching = Run(devices, directory / "watch", ["--mode", "watch"], api=pending)
        runs.append(watching)
        while get(watching.port, "/readyz")[0] != 200:
            time.sleep(0.02)
        _, watch_calm = _calm(watching, scrapes)
    finally:
        for run in reversed(runs):
            run.stop()
    return {
        "devices": devices,
        "pending": PENDING,
        "pending_reason_series": reasons,
        "list_first": statistics.median(t for t, _ in plain_firsts),
        "list_first_cpu": statistics.median(c for _, c in plain_firsts),
        "pending_list_first": statistics.median(t for t, _ in pending_firsts),
        "pending_list_first_cpu": statistics.median(c for _, c in pending_firsts),
        "list_calm_median": statistics.median(plain_calm),
        "list_peak_rss_bytes": plain_rss,
        "pending_list_calm_median": statistics.median(pending_calm),
        "pending_list_peak_rss_bytes": pending_rss,
        "pending_watch_calm_median": statistics.median(watch_calm),
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
            f"| list mode, first scrape (s, median of {FIRSTS}) | {result['list_first']:.3f} | "
            f"{result['pending_list_first']:.3f} | "
            f"{result['pending_list_first'] / result['list_first']:.2f} |",
            f"| list mode, first scrape's CPU (s, median of {FIRSTS}) | "
            f"{result['list_first_cpu']:.3f} | {result['pending_list_first_cpu']:.3f} | "
            f"{result['pending_list_first_cpu'] / result['list_first_cpu']:.2f} |",
            f"| peak RSS (MiB) | {result['list_peak_rss_bytes'] / mib:.0f} | "
            f"{result['pending_list_peak_rss_bytes'] / mib:.0f} | "
            f"{result['pending_list_peak_rss_bytes'] / result['list_peak_rss_bytes']:.2f} |",
            "",
            f"Watch mode with them, calm scrape: {result['pending_watch_calm_median']:.3f} s, "
            f"{result['pending_watch_calm_median'] / result['pending_list_calm_median']:.3f}x "
            "list mode's.",
        ]
    )


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """The diagnosis families' cost targets, and whether each is met."""
    size = f"{result['devices']:,} devices and {result['pending']:,} pending claims"
    return [
        (
            f"{size}: list-mode scrape grows by at most 10%",
            result["pending_list_calm_median"] <= 1.10 * result["list_calm_median"],
        ),
        (
            f"{size}: list mode, the first scrape's CPU grows by at most 10%",
            result["pending_list_first_cpu"] <= 1.10 * result["list_first_cpu"],
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
