"""What an opt-in view costs: calm scrapes and peak RSS of one cluster without and with it.

Shared by the Pod view's and the Node view's measurements (:mod:`benchmarks.pods`,
:mod:`benchmarks.nodeview`): each keeps, per mode, ``<mode>_calm_median`` and ``<mode>_rss``
without the view and the same under ``<view>_`` with it.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.processes import Run, get


def calm(run: Run, scrapes: int) -> tuple[list[float], int]:
    """Calm scrapes (after a first one) and the peak RSS."""
    run.scrape()
    made = [run.scrape() for _ in range(scrapes)]
    return made, run.peak_rss()


def watching(devices: int, directory: Path, args: list[str], api: Run) -> Run:
    """An exporter in watch mode over *api*'s fake API, once it is ready."""
    watched = Run(devices, directory, ["--mode", "watch", *args], api=api)
    while get(watched.port, "/readyz")[0] != 200:
        time.sleep(0.02)
    return watched


def measure(
    devices: int,
    scrapes: int,
    directory: Path,
    view: str,
    args: list[str],
    with_pods: bool = False,
    with_nodes: bool = False,
) -> tuple[dict[str, Any], bytes]:
    """Every figure without and with *view* (listed by *args*), and a scrape's body with it.

    One fake API serves the cluster with what the view lists (its pods or Nodes, as
    :class:`Run` takes them); the exporters without the view do not list it.
    """
    figures: dict[str, Any] = {}
    runs: list[Run] = []
    try:
        plain = Run(devices, directory / "plain", [], with_pods=with_pods, with_nodes=with_nodes)
        runs.append(plain)
        figures["list_calm"], figures["list_rss"] = calm(plain, scrapes)
        viewed = Run(devices, directory / view, args, api=plain)
        runs.append(viewed)
        figures[f"{view}_list_calm"], figures[f"{view}_list_rss"] = calm(viewed, scrapes)
        body = get(viewed.port, "/metrics")[1]
        for mode, named in (([], "watch"), (args, f"{view}_watch")):
            runs[1].stop()
            runs[1:] = [watching(devices, directory / named, mode, plain)]
            figures[f"{named}_calm"], figures[f"{named}_rss"] = calm(runs[1], scrapes)
    finally:
        for run in reversed(runs):
            run.stop()
    for key in ("list_calm", f"{view}_list_calm", "watch_calm", f"{view}_watch_calm"):
        figures[f"{key}_median"] = statistics.median(figures.pop(key))
    figures["nodes"] = plain.nodes
    return figures, body


def table(result: dict[str, Any], view: str, heading: str) -> list[str]:
    """The figures without and with *view* (its key prefix), under *heading*, as markdown."""
    mib = 2**20
    rows = [
        ("list mode, calm scrape (s)", "list_calm_median", 1.0),
        ("list mode, peak RSS (MiB)", "list_rss", mib),
        ("watch mode, calm scrape (s)", "watch_calm_median", 1.0),
        ("watch mode, peak RSS (MiB)", "watch_rss", mib),
    ]
    lines = [
        heading,
        "",
        f"| | without {view} | with {view} | with ÷ without |",
        "|---|---:|---:|---:|",
    ]
    for name, key, unit in rows:
        without, with_ = result[key], result[f"{view}_{key}"]
        digits = 3 if unit == 1.0 else 0
        lines.append(
            f"| {name} | {without / unit:.{digits}f} | {with_ / unit:.{digits}f} | "
            f"{with_ / without:.2f} |"
        )
    return lines
