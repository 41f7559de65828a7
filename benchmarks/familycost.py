"""What each family's rows cost in one first collection, read in this process.

The families an operator acts on are small beside the decoding and joining every family
shares, too small to tell apart by scraping an exporter with and without each (a first scrape's
CPU varies by a tenth from run to run).  Here the cluster of ``make bench`` with the pending
claims of :mod:`benchmarks.diagnosis` is read once, in process, as the exporter reads a first
list, and the CPU seconds spent making each family's rows are summed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
from twisted.internet.defer import Deferred

from benchmarks import cluster
from kdraexp.dra.devicecel import Matcher
from kdraexp.families import BY_NAME
from kdraexp.families.selection import select
from kdraexp.sources.gather import listed_first
from kdraexp.store.collection import CollectionBuilder

WATCHED = (
    "kube_resourcepool_idle_hourly_cost",
    "kube_resourceclaim_allocation_tainted",
    "kube_resourceslice_device_taint",
    "kube_resourcepool_allocatable_devices",
    "kube_resourceclaim_pending_reason",
)
"""The families whose share is printed; the first four are held to 5% each."""
HELD = WATCHED[:4]


def measure(devices: int, pending: int) -> dict[str, Any]:
    """CPU seconds of one first collection, and of each family's rows within it."""
    lists = cluster.cluster(max(1, devices // cluster.DEVICES_PER_NODE))
    lists["resourceclaims"] = lists["resourceclaims"] + cluster.pending_claims(pending)
    spent: dict[str, float] = {}
    real = {name: family.rows for name, family in BY_NAME.items()}
    for name, family in BY_NAME.items():
        object.__setattr__(family, "rows", _timed(name, real[name], spent))
    matcher = Matcher()
    try:
        started = time.process_time()
        _collect(lists, matcher)
        total = time.process_time() - started
    finally:
        matcher.close()
        for name, family in BY_NAME.items():
            object.__setattr__(family, "rows", real[name])
    return {"devices": devices, "pending": pending, "collection_cpu": total, "family_cpu": spent}


def _timed(
    name: str, rows: Callable[[Any], Iterable[Any]], spent: dict[str, float]
) -> Callable[[Any], list[Any]]:
    def timed(source: Any) -> list[Any]:
        started = time.process_time()
        made = list(rows(source))
        spent[name] = spent.get(name, 0.0) + time.process_time() - started
        return made

    return timed


def _collect(lists: dict[str, list[dict[str, Any]]], matcher: Matcher) -> None:
    selection = select(resources="resourceclaims,resourceslices,deviceclasses,devicetaintrules")
    builder = CollectionBuilder(selection, matcher)
    for first in (True, False):
        for kind in selection.kinds:
            if listed_first(kind) == first:
                items = [msgspec.Raw(msgspec.json.encode(o)) for o in lists.get(kind.plural, ())]
                builder.reader(kind).page(items)
        if first:
            builder.classes_listed()
    finished = Deferred.fromCoroutine(builder.finish())
    assert finished.called, "a collection read in process finishes at once"


def share(result: dict[str, Any], name: str) -> float:
    """The family's rows' CPU as a share of the collection's."""
    return float(result["family_cpu"].get(name, 0.0)) / float(result["collection_cpu"])


def table(result: dict[str, Any]) -> str:
    """The watched families' shares, as a markdown table."""
    return "\n".join(
        [
            f"One first collection at {result['devices']:,} devices with {result['pending']:,} "
            f"pending claims, read in process: {result['collection_cpu']:.2f} s of CPU.",
            "",
            "| family | CPU (s) | share |",
            "|---|---:|---:|",
            *(
                f"| `{name}` | {result['family_cpu'].get(name, 0.0):.3f} | "
                f"{share(result, name):.1%} |"
                for name in WATCHED
            ),
        ]
    )


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """Each family an operator acts on within 5% of a first collection."""
    size = f"{result['devices']:,} devices and {result['pending']:,} pending claims"
    return [
        (f"{size}: {name} costs at most 5% of a first collection", share(result, name) <= 0.05)
        for name in HELD
    ]
