"""What each family's rows cost in one first collection, read in this process.

The families an operator acts on are small beside the decoding and joining every family
shares, too small to tell apart by scraping an exporter with and without each (a first scrape's
CPU varies by a tenth from run to run).  Here the cluster of ``make bench`` with the pending
claims of :mod:`benchmarks.diagnosis` is read once, in process, as the exporter reads a first
list, and the CPU seconds spent making each family's rows are summed.  They are compared with
the collection and with a first scrape's CPU measured by scraping in the same run.

The lists are encoded before the clock starts and frozen out of the garbage collector's walks,
as the exporter freezes what it holds at start: neither is the exporter's work.  Pool facts
several families read (:data:`SHARED`: device states, first fit) are made by whichever family
asks first; their time is counted apart, not charged to that family.  So are the garbage
collector's passes: they fall in whichever code allocates when a threshold is crossed, and cost
in proportion to everything the collection holds, so they are counted in a row of their own
rather than by chance in one family's (a single full pass is a tenth of a second here).
"""

from __future__ import annotations

import gc
import importlib
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
from twisted.internet.defer import Deferred

from benchmarks import cluster
from benchmarks.processes import PAGE_SIZE
from kdraexp.cel.matching import Matcher
from kdraexp.families import BY_NAME
from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from kdraexp.sources.gather import listed_first
from kdraexp.store.collection import CollectionBuilder

WATCHED = (
    "kube_resourcepool_idle_hourly_cost",
    "kube_resourceclaim_allocation_tainted",
    "kube_resourceslice_device_taint",
    "kube_resourcepool_allocatable_devices",
    "kube_resourceclaim_pending_reason",
    "kube_resourceclaim_allocation_orphaned",
    "kube_resourceclaim_allocation_binding",
    "kube_resourceclaim_allocation_binding_failed",
    "kube_resourceclaim_allocation_node_info",
    "kube_resourceclaim_labels",
    "kube_resourceclaim_annotations",
)
"""The families whose share is printed, each held to 5% of a first scrape."""
CHARGEBACK = ("resourceclaims=[team,cost-center]", "resourceclaims=[resource.kubernetes.io/*]")
"""The allowlists of a chargeback, labels and annotations: the claims' team and cost center,
the controller's annotation (a pattern: every annotation decoded, those matching kept)."""
NO_ALLOWLISTS = ("", "")
SHARED = (
    ("kdraexp.allocator.index", "ClusterIndex", "states"),
    ("kdraexp.allocator.pending", None, "allocatable"),
    ("kdraexp.families.resourcepool", None, "allocatable"),
)
"""Where families read pool facts kept for all of them: (module, class or None, name)."""
_SHARED_ROW = "pool facts shared by families (device states, first fit)"
_GC_ROW = "garbage collector's passes, wherever they fell"
RUNS = 3
"""First collections measured; each figure is the fastest of them (as ``timeit`` advises: what
else runs slows a run, nothing speeds it)."""


def measure(devices: int, pending: int, allowlists: tuple[str, str] = CHARGEBACK) -> dict[str, Any]:
    """CPU seconds of a first collection, and of each family's rows within it (fastest of RUNS).

    *allowlists* are ``--metric-labels-allowlist`` and ``--metric-annotations-allowlist``: the
    families of claims' labels and annotations are written with them and measured as the
    others (:data:`NO_ALLOWLISTS`: not written, as by default).
    """
    lists = cluster.cluster(max(1, devices // cluster.DEVICES_PER_NODE))
    lists["resourceclaims"] = lists["resourceclaims"] + cluster.pending_claims(pending)
    encoded = {
        plural: [msgspec.Raw(msgspec.json.encode(item)) for item in items]
        for plural, items in lists.items()
    }
    del lists
    collections: list[float] = []
    spent: dict[str, float] = {}
    for _ in range(RUNS):
        total, one = _measure_once(encoded, allowlists)
        collections.append(total)
        for name, took in one.items():
            spent[name] = min(spent.get(name, took), took)
    return {
        "devices": devices,
        "pending": pending,
        "collection_cpu": min(collections),
        "family_cpu": spent,
    }


def _measure_once(
    encoded: dict[str, list[msgspec.Raw]], allowlists: tuple[str, str]
) -> tuple[float, dict[str, float]]:
    """CPU seconds of one first collection of *encoded*, and of each family's rows within it."""
    spent: dict[str, float] = {}
    inner: list[float] = [0.0]
    """Shared facts' seconds within the family timed now, to be taken out of its share."""
    real = {name: family.rows for name, family in BY_NAME.items()}
    shared = [_shared(where, spent, inner) for where in SHARED]
    for name, family in BY_NAME.items():
        object.__setattr__(family, "rows", _timed(name, real[name], spent, inner))
    matcher = Matcher()
    gc.collect()
    gc.freeze()
    passes = _passes(spent, inner)
    gc.callbacks.append(passes)
    try:
        started = time.process_time()
        _collect(encoded, matcher, allowlists)
        total = time.process_time() - started
    finally:
        gc.callbacks.remove(passes)
        gc.unfreeze()
        matcher.close()
        for name, family in BY_NAME.items():
            object.__setattr__(family, "rows", real[name])
        for undo in shared:
            undo()
    return total, spent


def _timed(
    name: str, rows: Callable[[Any], Iterable[Any]], spent: dict[str, float], inner: list[float]
) -> Callable[[Any], list[Any]]:
    def timed(source: Any) -> list[Any]:
        inner[0] = 0.0
        started = time.process_time()
        made = list(rows(source))
        took = time.process_time() - started - inner[0]
        spent[name] = spent.get(name, 0.0) + took
        return made

    return timed


def _shared(
    where: tuple[str, str | None, str], spent: dict[str, float], inner: list[float]
) -> Callable[[], None]:
    """Time what *where* names apart from the family calling it; returns the undoing."""
    module, owner, name = where
    holder: Any = importlib.import_module(module)
    if owner is not None:
        holder = getattr(holder, owner)
    real = getattr(holder, name)

    def timed(*args: Any) -> Any:
        started, passes = time.process_time(), spent.get(_GC_ROW, 0.0)
        try:
            return real(*args)
        finally:
            took = time.process_time() - started - (spent.get(_GC_ROW, 0.0) - passes)
            inner[0] += took
            spent[_SHARED_ROW] = spent.get(_SHARED_ROW, 0.0) + took

    setattr(holder, name, timed)
    return lambda: setattr(holder, name, real)


def _passes(spent: dict[str, float], inner: list[float]) -> Callable[[str, dict[str, Any]], None]:
    """A garbage collector callback timing its passes apart from the family timed now."""
    began = [0.0]

    def passes(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.process_time()
            return
        took = time.process_time() - began[0]
        inner[0] += took
        spent[_GC_ROW] = spent.get(_GC_ROW, 0.0) + took

    return passes


def _collect(
    encoded: dict[str, list[msgspec.Raw]], matcher: Matcher, allowlists: tuple[str, str]
) -> None:
    labels, annotations = allowlists
    selection = select(
        resources="resourceclaims,resourceslices,deviceclasses,devicetaintrules",
        options=FamilyOptions.from_flags(
            {"metric-labels-allowlist": labels, "metric-annotations-allowlist": annotations}
        ),
    )
    builder = CollectionBuilder(selection, matcher)
    for first in (True, False):
        for kind in selection.kinds:
            if listed_first(kind) == first:
                items = encoded.get(kind.plural, [])
                # by pages, as the exporter lists: a page is bounded by --max-response-bytes
                for start in range(0, max(1, len(items)), PAGE_SIZE):
                    builder.reader(kind).page(items[start : start + PAGE_SIZE])
        if first:
            builder.classes_listed()
    finished = Deferred.fromCoroutine(builder.finish())
    assert finished.called, "a collection read in process finishes at once"


def share(result: dict[str, Any], name: str, whole: float) -> float:
    """The family's rows' CPU as a share of *whole* CPU seconds."""
    return float(result["family_cpu"].get(name, 0.0)) / whole


def table(result: dict[str, Any], first_scrape_cpu: float) -> str:
    """The watched families' shares, as a markdown table."""
    collection = float(result["collection_cpu"])
    return "\n".join(
        [
            f"One first collection at {result['devices']:,} devices with {result['pending']:,} "
            f"pending claims, read in process: {collection:.2f} s of CPU (fastest of {RUNS}); a "
            f"collection made at start of the same cluster, by the exporter: "
            f"{first_scrape_cpu:.2f} s (median).",
            "",
            "| family | CPU (s) | share of the collection | share of a first scrape |",
            "|---|---:|---:|---:|",
            *(
                f"| {name if name in (_SHARED_ROW, _GC_ROW) else f'`{name}`'} | "
                f"{result['family_cpu'].get(name, 0.0):.3f} | "
                f"{share(result, name, collection):.1%} | "
                f"{share(result, name, first_scrape_cpu):.1%} |"
                for name in (*WATCHED, _SHARED_ROW, _GC_ROW)
            ),
        ]
    )


def targets(result: dict[str, Any], first_scrape_cpu: float) -> list[tuple[str, bool]]:
    """Each family an operator acts on within 5% of a first scrape's CPU."""
    size = f"{result['devices']:,} devices and {result['pending']:,} pending claims"
    return [
        (
            f"{size}: {name} costs at most 5% of a first scrape's CPU",
            share(result, name, first_scrape_cpu) <= 0.05,
        )
        for name in WATCHED
    ]
