"""A field every claim lacks: the claims of ``make bench`` without ``metadata.creationTimestamp``.

The cluster at 64,000 devices (32,000 claims), each claim's creation time a value not read: the
slowest ``/healthz`` answer while the collection made at start runs, during the first scrape
and during a later one, and how much the exporter logged.  Each problem used to be a line of its
own, written in one turn of the reactor (32,000 lines, 4.7 MB, ``/healthz`` held 450-530 ms).
``python -m benchmarks.undated [DEVICES]`` measures it alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.cluster import DEVICES_PER_NODE
from benchmarks.processes import Run

SLOW_TURN = b"A turn of the reactor took "
"""How the exporter's log line about a slow turn of its reactor begins."""


def measure(devices: int, directory: Path) -> dict[str, Any]:
    """Every figure, for the cluster of *devices* devices with undated claims."""
    run = Run(devices, directory, [], shape="undated")
    try:
        healthz_first, first = run.healthz_during_scrape()
        healthz_later, later = run.healthz_during_scrape()
    finally:
        run.stop()
    log = run.log.read_bytes()
    return {
        "devices": run.nodes * DEVICES_PER_NODE,
        "claims": run.nodes * DEVICES_PER_NODE // 2,
        "start": run.start_seconds,
        "scrape_first": first,
        "scrape_later": later,
        "healthz_max_during_start": run.healthz_while_starting,
        "healthz_max_during_first_scrape": healthz_first,
        "healthz_max_during_scrape": healthz_later,
        "log_lines": log.count(b"\n"),
        "log_bytes": len(log),
        "slow_turns_logged": log.count(SLOW_TURN),
    }


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    return "\n".join(
        [
            f"At {result['devices']:,} devices, {result['claims']:,} claims without"
            " creationTimestamp:",
            "",
            "| ready after (s) | first / later scrape (s) | /healthz max, start / first / later"
            " scrape (ms) | log lines (bytes) | slow turns logged |",
            "|---|---|---|---|---|",
            f"| {result['start']:.2f} | {result['scrape_first']:.2f} /"
            f" {result['scrape_later']:.2f} | {result['healthz_max_during_start'] * 1000:.0f} /"
            f" {result['healthz_max_during_first_scrape'] * 1000:.0f} /"
            f" {result['healthz_max_during_scrape'] * 1000:.0f} | {result['log_lines']:,}"
            f" ({result['log_bytes']:,}) | {result['slow_turns_logged']} |",
        ]
    )


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """/healthz as prompt as with the field set, and the problems one line, not one a claim."""
    size = f"{result['claims']:,} claims without creationTimestamp"
    healthz = (
        result["healthz_max_during_start"],
        result["healthz_max_during_first_scrape"],
        result["healthz_max_during_scrape"],
    )
    return [
        (f"{size}: /healthz within 100 ms at start and during scrapes", max(healthz) <= 0.1),
        (f"{size}: at most 100 log lines", result["log_lines"] <= 100),
    ]


if __name__ == "__main__":
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        measured = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 64000, Path(directory))
    print(table(measured))
    for name, ok in targets(measured):
        print(f"- {'met' if ok else 'MISSED'}: {name}")
