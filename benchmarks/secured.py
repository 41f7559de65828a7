"""What TLS and the auth filter cost a scrape: one cluster scraped plain, and secured.

The cluster of ``make bench`` at one size, read in list mode (the default) from one fake API by
two exporters: one plain, one serving over TLS (``--tls-config``) behind ``--auth-filter``,
scraped as Prometheus scrapes it, with a token the fake API's reviews allow.  After a first
scrape of each (the filter's cache warm from then on), calm gzip scrapes alternate between the
two, so that both meet the same moments of a shared machine; each is on a new connection, as
:meth:`~benchmarks.processes.Run.scrape` makes them, so the secured one pays a TLS handshake
every scrape, which Prometheus, keeping its connection alive, pays once.  The fake API counts
the reviews the calm scrapes sent: a cache hit sends none.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.processes import Run

PAIRS = 15
"""Calm scrapes of each: the target is a 5% difference, finer than five scrapes tell apart on
a shared machine (their spread is 10-20%)."""


def measure(devices: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices."""
    plain = Run(devices, directory / "plain", [])
    try:
        secured = Run(devices, directory / "secured", [], api=plain, secured=True)
        try:
            plain.scrape()
            secured.scrape()
            reviews = plain.reviews()
            plain_times, secured_times = [], []
            for _ in range(PAIRS):
                plain_times.append(plain.scrape())
                secured_times.append(secured.scrape())
            sent = plain.reviews() - reviews
        finally:
            secured.stop()
    finally:
        plain.stop()
    return {
        "devices": devices,
        "scrapes": PAIRS,
        "plain_calm_median": statistics.median(plain_times),
        "secured_calm_median": statistics.median(secured_times),
        "reviews_during_calm_scrapes": sent,
    }


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    plain, secured = result["plain_calm_median"], result["secured_calm_median"]
    return "\n".join(
        [
            f"At {result['devices']:,} devices, list mode, median of {result['scrapes']} calm "
            "gzip scrapes each (a new connection each):",
            "",
            "| | plain | TLS and --auth-filter | secured ÷ plain |",
            "|---|---:|---:|---:|",
            f"| calm scrape (s) | {plain:.3f} | {secured:.3f} | {secured / plain:.3f} |",
            "",
            f"Reviews sent during the calm scrapes: {result['reviews_during_calm_scrapes']}.",
        ]
    )


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """TLS and the filter's cost targets, and whether each is met."""
    size = f"{result['devices']:,} devices"
    ratio = result["secured_calm_median"] / result["plain_calm_median"]
    return [
        (
            f"{size}: a calm gzip scrape over TLS with --auth-filter, cache warm, "
            "within 1.05x a plain one",
            ratio <= 1.05,
        ),
        (
            f"{size}: calm scrapes with --auth-filter, cache warm, send no review",
            result["reviews_during_calm_scrapes"] == 0,
        ),
    ]


if __name__ == "__main__":
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        measured = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 64000, Path(directory))
    print(table(measured))
    for name, ok in targets(measured):
        print(f"- {'met' if ok else 'MISSED'}: {name}")
