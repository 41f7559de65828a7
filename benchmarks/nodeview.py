"""What the Node view costs: one cluster with its Nodes listed and without.

The cluster of ``make bench`` at one size, with its Nodes (benchmarks.cluster.node_objects: one
a node, a few kilobytes each, a few cordoned or not ready) and ``--expect-pools``: calm scrapes
and peak RSS in watch mode, and in list mode, each without and with ``nodes`` in
``--resources``.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.cluster import DEVICES_PER_NODE, DRIVER
from benchmarks.processes import Run, get

WITH_NODES = [
    "--resources",
    "resourceclaims,resourceslices,deviceclasses,nodes",
    "--expect-pools",
    f"{DRIVER}=nvidia.com/gpu.present=true",
]


def _measured(run: Run, scrapes: int) -> tuple[list[float], int]:
    """Calm scrapes (after a first one) and the peak RSS."""
    run.scrape()
    calm = [run.scrape() for _ in range(scrapes)]
    return calm, run.peak_rss()


def _watching(devices: int, directory: Path, args: list[str], api: Run) -> Run:
    watching = Run(devices, directory, ["--mode", "watch", *args], api=api)
    while get(watching.port, "/readyz")[0] != 200:
        time.sleep(0.02)
    return watching


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices and its Nodes."""
    figures: dict[str, Any] = {"devices": devices}
    runs: list[Run] = []
    try:
        plain = Run(devices, directory / "plain", [], with_nodes=True)
        runs.append(plain)
        figures["list_calm"], figures["list_rss"] = _measured(plain, scrapes)
        viewed = Run(devices, directory / "nodes", WITH_NODES, api=plain)
        runs.append(viewed)
        figures["nodes_list_calm"], figures["nodes_list_rss"] = _measured(viewed, scrapes)
        body = get(viewed.port, "/metrics")[1]
        figures["nodes"] = viewed.nodes
        figures["node_series"] = sum(
            body.count(b"\n" + name)
            for name in (b"kube_resourcepool_node_state{", b"kube_node_dra_pool_missing{")
        )
        viewed.stop()
        runs.remove(viewed)
        watch = _watching(devices, directory / "watch", [], plain)
        runs.append(watch)
        figures["watch_calm"], figures["watch_rss"] = _measured(watch, scrapes)
        watch.stop()
        runs.remove(watch)
        watch_nodes = _watching(devices, directory / "watch-nodes", WITH_NODES, plain)
        runs.append(watch_nodes)
        figures["nodes_watch_calm"], figures["nodes_watch_rss"] = _measured(watch_nodes, scrapes)
    finally:
        for run in reversed(runs):
            run.stop()
    for key in ("list_calm", "nodes_list_calm", "watch_calm", "nodes_watch_calm"):
        figures[f"{key}_median"] = statistics.median(figures.pop(key))
    figures["devices"] = figures["nodes"] * DEVICES_PER_NODE
    return figures


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    mib = 2**20
    rows = [
        ("list mode, calm scrape (s)", "list_calm_median", "nodes_list_calm_median", 1.0),
        ("list mode, peak RSS (MiB)", "list_rss", "nodes_list_rss", mib),
        ("watch mode, calm scrape (s)", "watch_calm_median", "nodes_watch_calm_median", 1.0),
        ("watch mode, peak RSS (MiB)", "watch_rss", "nodes_watch_rss", mib),
    ]
    lines = [
        f"At {result['devices']:,} devices, without and with its {result['nodes']:,} Nodes "
        f"listed ({result['node_series']:,} Node-view series):",
        "",
        "| | without Nodes | with Nodes | with ÷ without |",
        "|---|---:|---:|---:|",
    ]
    for name, without, with_, unit in rows:
        digits = 3 if unit == 1.0 else 0
        lines.append(
            f"| {name} | {result[without] / unit:.{digits}f} | {result[with_] / unit:.{digits}f} | "
            f"{result[with_] / result[without]:.2f} |"
        )
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """The Node view's cost targets, and whether each is met."""
    size = f"{result['devices']:,} devices and {result['nodes']:,} Nodes"
    return [
        (
            f"{size}: watch mode, a calm scrape grows by at most 10% with the Node view",
            result["nodes_watch_calm_median"] <= 1.10 * result["watch_calm_median"],
        ),
        (
            f"{size}: watch mode, peak RSS grows by at most 15% with the Node view",
            result["nodes_watch_rss"] <= 1.15 * result["watch_rss"],
        ),
    ]
