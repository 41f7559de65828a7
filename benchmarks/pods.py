"""What the Pod view costs: one cluster with its pods listed and without.

The cluster of ``make bench`` at one size, with its pods (benchmarks.cluster.pods: 50,000 at
64,000 devices, 20,000 of them using devices): calm scrapes and peak RSS in list mode and in
watch mode, each without and with ``pods`` in ``--resources``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.cluster import DEVICES_PER_NODE, PODS_PER_DEVICE
from benchmarks.processes import Run, get

WITH_PODS = ["--resources", "resourceclaims,resourceslices,deviceclasses,pods"]


def _measured(run: Run, scrapes: int) -> tuple[list[float], int]:
    """Calm scrapes (after a first one that reads everything) and the peak RSS."""
    run.scrape()
    calm = [run.scrape() for _ in range(scrapes)]
    return calm, run.peak_rss()


def _watching(devices: int, directory: Path, args: list[str], api: Run) -> Run:
    watching = Run(devices, directory, ["--mode", "watch", *args], api=api)
    while get(watching.port, "/readyz")[0] != 200:
        time.sleep(0.02)
    return watching


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices and its pods."""
    figures: dict[str, Any] = {"devices": devices}
    runs: list[Run] = []
    try:
        plain = Run(devices, directory / "plain", [])
        runs.append(plain)
        figures["list_calm"], figures["list_rss"] = _measured(plain, scrapes)
        with_pods = Run(devices, directory / "pods", WITH_PODS, with_pods=True)
        runs.append(with_pods)
        figures["pods_list_calm"], figures["pods_list_rss"] = _measured(with_pods, scrapes)
        body = get(with_pods.port, "/metrics")[1]
        figures["pods"] = round(with_pods.nodes * DEVICES_PER_NODE * PODS_PER_DEVICE)
        figures["pod_series"] = body.count(b"\nkube_pod_dra_")
        watch = _watching(devices, directory / "watch", [], plain)
        runs.append(watch)
        figures["watch_calm"], figures["watch_rss"] = _measured(watch, scrapes)
        watch.stop()
        runs.remove(watch)
        watch_pods = _watching(devices, directory / "watch-pods", WITH_PODS, with_pods)
        runs.append(watch_pods)
        figures["pods_watch_calm"], figures["pods_watch_rss"] = _measured(watch_pods, scrapes)
    finally:
        for run in reversed(runs):
            run.stop()
    for key in ("list_calm", "pods_list_calm", "watch_calm", "pods_watch_calm"):
        figures[f"{key}_median"] = statistics.median(figures.pop(key))
    return figures


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    mib = 2**20
    rows = [
        ("list mode, calm scrape (s)", "list_calm_median", "pods_list_calm_median", 1.0),
        ("list mode, peak RSS (MiB)", "list_rss", "pods_list_rss", mib),
        ("watch mode, calm scrape (s)", "watch_calm_median", "pods_watch_calm_median", 1.0),
        ("watch mode, peak RSS (MiB)", "watch_rss", "pods_watch_rss", mib),
    ]
    lines = [
        f"At {result['devices']:,} devices, without and with its {result['pods']:,} pods listed "
        f"({result['pod_series']:,} Pod-view series):",
        "",
        "| | without pods | with pods | with ÷ without |",
        "|---|---:|---:|---:|",
    ]
    for name, without, with_, unit in rows:
        digits = 3 if unit == 1.0 else 0
        lines.append(
            f"| {name} | {result[without] / unit:.{digits}f} | {result[with_] / unit:.{digits}f} | "
            f"{result[with_] / result[without]:.2f} |"
        )
    ratio = result["pods_watch_calm_median"] / result["pods_list_calm_median"]
    lines += ["", f"Watch mode with pods, calm scrape: {ratio:.3f}x list mode's with pods."]
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """The Pod view's cost targets, and whether each is met."""
    size = f"{result['devices']:,} devices and {result['pods']:,} pods"
    return [
        (
            f"{size}: watch mode, peak RSS grows by at most 15% with pods",
            result["pods_watch_rss"] <= 1.15 * result["watch_rss"],
        ),
        (
            f"{size}: watch mode with pods, calm scrape <= 0.05x list mode's",
            result["pods_watch_calm_median"] <= 0.05 * result["pods_list_calm_median"],
        ),
        (
            f"{size}: list mode, a scrape grows by at most 1.5x with pods",
            result["pods_list_calm_median"] <= 1.5 * result["list_calm_median"],
        ),
    ]
