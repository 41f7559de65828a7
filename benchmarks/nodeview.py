"""What the Node view costs: one cluster with its Nodes listed and without.

The cluster of ``make bench`` at one size, with its Nodes (benchmarks.cluster.node_objects: one
a node, a few kilobytes each, a few cordoned or not ready) and ``--expect-pools``: calm scrapes
and peak RSS in watch mode, and in list mode, each without and with ``nodes`` in
``--resources``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import views
from benchmarks.cluster import DEVICES_PER_NODE, DRIVER

WITH_NODES = [
    "--resources",
    "resourceclaims,resourceslices,deviceclasses,nodes",
    "--expect-pools",
    f"{DRIVER}=nvidia.com/gpu.present=true",
]


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices and its Nodes."""
    figures, body = views.measure(devices, scrapes, directory, "nodes", WITH_NODES, with_nodes=True)
    figures["devices"] = figures["nodes"] * DEVICES_PER_NODE
    figures["node_series"] = sum(
        body.count(b"\n" + name)
        for name in (b"kube_resourcepool_node_state{", b"kube_node_dra_pool_missing{")
    )
    return figures


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    heading = (
        f"At {result['devices']:,} devices, without and with its {result['nodes']:,} Nodes "
        f"listed ({result['node_series']:,} Node-view series):"
    )
    return "\n".join(views.table(result, "nodes", heading))


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
