"""What the Pod view costs: one cluster with its pods listed and without.

The cluster of ``make bench`` at one size, with its pods (benchmarks.cluster.pods: 50,000 at
64,000 devices, 20,000 of them using devices): calm scrapes and peak RSS in list mode and in
watch mode, each without and with ``pods`` in ``--resources``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import views
from benchmarks.cluster import DEVICES_PER_NODE, PODS_PER_DEVICE

WITH_PODS = ["--resources", "resourceclaims,resourceslices,deviceclasses,pods"]


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices and its pods."""
    figures, body = views.measure(devices, scrapes, directory, "pods", WITH_PODS, with_pods=True)
    figures["devices"] = devices
    figures["pods"] = round(figures.pop("nodes") * DEVICES_PER_NODE * PODS_PER_DEVICE)
    figures["pod_series"] = body.count(b"\nkube_pod_dra_")
    return figures


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    heading = (
        f"At {result['devices']:,} devices, without and with its {result['pods']:,} pods listed "
        f"({result['pod_series']:,} Pod-view series):"
    )
    lines = views.table(result, "pods", heading)
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
