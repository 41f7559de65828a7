"""Scrapes in which every object is new, and the exporter at rest, on one fake API.

An exporter serving a small cluster (1,000 devices) sees it replaced whole by a large one
whose every object is new: no ``resourceVersion`` to tell anything unchanged by, a uid, UUID
and PCI bus id of its own on every object and device (``cluster.renew``).  Then every object
changes again (a re-list after a 410, a batch of jobs ending), then nothing changes but the
objects still carry no ``resourceVersion`` (each is read again and found alike).  For each:
the scrape's seconds and CPU, the slowest ``/healthz`` answer meanwhile, and the peak RSS of
the exporter with its CEL process, from just before the scrape.  The floor is the large
cluster's fetch and decode.

The same for a fleet of another shape (``cluster.SHAPES["h100"]``: eight H100 GPUs a node, each
with three capacities, claims in 50 namespaces, two priced classes selecting every GPU), its
objects without ``resourceVersion`` from the first: a 20-slice cluster, then the large one all
new; and an exporter started on the large one (the collection it makes at start).

Beside them, two exporters at rest on a small cluster, never scraped: one with the default
families (its RSS with every child once the CEL process has been idle long enough to end), and
one writing only the original's seven families, which need no CEL (whether it ever started
the CEL process).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.cluster import DEVICES_PER_NODE
from benchmarks.processes import Run
from kdraexp.families import FAMILIES
from kdraexp.sources.celidle import IDLE

SMALL = 1000
"""Devices of the cluster served first."""
ORIGINAL = "|".join(f"^{family.name}$" for family in FAMILIES if family.original)
"""The original's seven families: none evaluates a selector."""
RESTED = IDLE * 4 / 3 + 5
"""Seconds after its start at which the exporter at rest is measured: its CEL process, idle
since the start, has been looked at and ended by then."""
SHAPE = "h100"
"""The other fleet's shape (``cluster.SHAPES``)."""
SHAPE_SMALL = 20
"""Slices (nodes) of the other fleet's small cluster."""


def measure(devices: int, scrapes: int, directory: Path, rest: bool = True) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices replacing a small one.

    Without *rest*, the exporter at rest is not waited for (its CEL process ends after
    :data:`IDLE` seconds): ``resting_rss_bytes`` is then None.
    """
    resting = Run(SMALL, directory / "resting", [])
    started = time.monotonic()
    runs = [resting]
    try:
        original = Run(SMALL, directory / "original", ["--metric-allowlist", ORIGINAL], api=resting)
        runs.append(original)
        original.scrape()
        original_children = len(original.children())
        renewing = Run(SMALL, directory / "renewing", [])
        runs.append(renewing)
        renewing.scrape()
        nodes = max(1, devices // DEVICES_PER_NODE)
        figures = {}
        for case in ("after_small", "all_changed", "read_again"):
            if case != "read_again":
                renewing.api_get(f"/renew?nodes={nodes}")
            figures[case] = _scrape(renewing)
        floors = [renewing.floor() for _ in range(scrapes)]
        figures.update(_shaped(nodes, scrapes, directory, runs))
        resting_rss, resting_children = None, None
        if rest:
            time.sleep(max(0.0, RESTED - (time.monotonic() - started)))
            resting_rss, resting_children = resting.rss(), len(resting.children())
    finally:
        for run in reversed(runs):
            run.stop()
    return {
        "devices": devices,
        "floor_median": statistics.median(floors),
        **{f"{case}_{name}": value for case, one in figures.items() for name, value in one.items()},
        "resting_rss_bytes": resting_rss,
        "resting_children": resting_children,
        "original_children": original_children,
    }


def _shaped(nodes: int, scrapes: int, directory: Path, runs: list[Run]) -> dict[str, Any]:
    """The other fleet: its first scrape after a small cluster, and an exporter started on it."""
    shaped = Run(SHAPE_SMALL * DEVICES_PER_NODE, directory / "shaped", [], shape=SHAPE)
    runs.append(shaped)
    shaped.api_get(f"/renew?nodes={SHAPE_SMALL}&shape={SHAPE}")  # no resourceVersion
    shaped.scrape()
    shaped.api_get(f"/renew?nodes={nodes}&shape={SHAPE}")
    figures = {"shaped": _scrape(shaped)}
    floor = statistics.median(shaped.floor() for _ in range(scrapes))
    started = Run(nodes * DEVICES_PER_NODE, directory / "shaped-start", [], api=shaped)
    runs.append(started)
    figures["shaped_start"] = {
        "scrape": started.start_seconds,
        "cpu": started.start_cpu,
        "healthz_max": started.healthz_while_starting,
        "peak_rss_bytes": started.peak_rss(),
        "floor": floor,
    }
    figures["shaped"]["floor"] = floor
    return figures


def _scrape(run: Run) -> dict[str, float]:
    """One scrape's seconds, CPU, slowest /healthz and peak RSS (with every child)."""
    run.reset_peak()
    cpu = run.cpu()
    healthz, took = run.healthz_during_scrape()
    return {
        "scrape": took,
        "cpu": run.cpu() - cpu,
        "healthz_max": healthz,
        "peak_rss_bytes": run.peak_rss(),
    }


CASES = {
    "after_small": "every object new, after a small cluster",
    "all_changed": "every object changed again",
    "read_again": "nothing changed, read again (no resourceVersion)",
}
SHAPED_CASES = {
    "shaped": f"H100 fleet: every object new, after a {SHAPE_SMALL}-slice cluster",
    "shaped_start": "H100 fleet: the collection at start",
}


def table(result: dict[str, Any]) -> str:
    """The figures, as markdown."""
    floor = result["floor_median"]
    lines = [
        f"At {result['devices']:,} devices, objects without resourceVersion (floor: "
        f"{floor:.3f} s to fetch and decode them):",
        "",
        "| scrape | seconds | ÷ floor | CPU (s) | /healthz slowest (ms) | peak RSS (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for case, what in CASES.items():
        lines.append(
            f"| {what} | {result[f'{case}_scrape']:.2f} | {result[f'{case}_scrape'] / floor:.1f}x "
            f"| {result[f'{case}_cpu']:.2f} | {result[f'{case}_healthz_max'] * 1000:.0f} | "
            f"{result[f'{case}_peak_rss_bytes'] / 2**20:.0f} |"
        )
    for case, what in SHAPED_CASES.items():
        took, shaped_floor = result[f"{case}_scrape"], result[f"{case}_floor"]
        lines.append(
            f"| {what} (floor {shaped_floor:.3f} s) | {took:.2f} | {took / shaped_floor:.1f}x "
            f"| {result[f'{case}_cpu']:.2f} | {result[f'{case}_healthz_max'] * 1000:.0f} | "
            f"{result[f'{case}_peak_rss_bytes'] / 2**20:.0f} |"
        )
    lines.append("")
    if result["resting_rss_bytes"] is not None:
        lines.append(
            f"At rest ({SMALL:,} devices, never scraped, {RESTED:.0f} s after start): "
            f"{result['resting_rss_bytes'] / 2**20:.1f} MiB with every child "
            f"({result['resting_children']} child processes)."
        )
    lines.append(
        f"The original's seven families alone, scraped: {result['original_children']} child "
        "processes."
    )
    return "\n".join(lines)


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """Each target of these cases, and whether it is met."""
    size, floor = f"{result['devices']:,} devices", result["floor_median"]
    checks = [
        (
            f"{size}: a scrape in which every object is new <= 3x the floor",
            max(result["after_small_scrape"], result["all_changed_scrape"]) <= 3 * floor,
        ),
        (
            f"{size}: peak RSS with every child <= 320 MiB when every object is new",
            max(result["after_small_peak_rss_bytes"], result["all_changed_peak_rss_bytes"])
            <= 320 * 2**20,
        ),
        (
            f"{size}: /healthz within 100 ms while every object is new or read again",
            max(result[f"{case}_healthz_max"] for case in CASES) <= 0.1,
        ),
        (
            f"{size}: /healthz within 100 ms while an H100 fleet's objects are all new, after a "
            f"{SHAPE_SMALL}-slice cluster and in the collection at start",
            max(result[f"{case}_healthz_max"] for case in SHAPED_CASES) <= 0.1,
        ),
        (
            "no CEL process while no family written evaluates selectors",
            result["original_children"] == 0,
        ),
    ]
    if result["resting_rss_bytes"] is not None:
        checks.append(
            (
                "an exporter at rest, its CEL process ended, <= 65 MiB with every child",
                result["resting_rss_bytes"] <= 65 * 2**20 and result["resting_children"] == 0,
            )
        )
    return checks
