"""Watch mode and sharding, measured against list mode on one fake API, at one cluster size.

List mode first: scrapes of a calm cluster, then under churn (20 claims a second released or
allocated again, as pods end and start; a scrape a second).  Watch mode the same, plus the API
requests a scrape makes, the time from a change to the first scrape that shows it, and, once
churn has stopped, whether both modes write the same samples.  Then four shards, each listing
its part: each one's peak RSS against the unsharded exporter's.
"""

from __future__ import annotations

import collections
import http.client
import json
import statistics
import time
import zlib
from pathlib import Path
from typing import Any

from benchmarks.processes import SCRAPE_HEADERS, Run, get

CHURN = 20
"""Claims changed a second."""
SHARDS = 4


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices."""
    listing = Run(devices, directory / "list", [])
    runs = [listing]
    try:
        listing.scrape()
        calm_list = [listing.scrape() for _ in range(scrapes)]
        churn_list = _under_churn(listing, scrapes)
        list_rss = listing.peak_rss()
        watching = Run(devices, directory / "watch", ["--mode", "watch"], api=listing)
        runs.append(watching)
        synced = watching.start_seconds  # Run waits for /readyz: synchronised, in watch mode
        watching.scrape()
        before = listing.list_requests()
        calm_watch = [watching.scrape() for _ in range(scrapes)]
        requests = (listing.list_requests() - before) / scrapes
        latencies = [_latency(watching, f"probe-{index}") for index in range(scrapes)]
        churn_watch = _under_churn(watching, scrapes)
        watch_rss = watching.peak_rss()
        differences = _parity(listing, watching)
        shards = [
            Run(
                devices,
                directory / f"shard-{index}",
                ["--shard", str(index), "--total-shards", str(SHARDS)],
                api=listing,
            )
            for index in range(SHARDS)
        ]
        runs += shards
        for shard in shards:
            shard.scrape()
            shard.scrape()
        shard_rss = [shard.peak_rss() for shard in shards]
    finally:
        for run in reversed(runs):
            run.stop()
    return {
        "devices": devices,
        "list_calm_median": statistics.median(calm_list),
        "list_churn_median": statistics.median(churn_list),
        "list_peak_rss_bytes": list_rss,
        "watch_sync_seconds": synced,
        "watch_calm_median": statistics.median(calm_watch),
        "watch_requests_per_scrape": requests,
        "watch_churn_median": statistics.median(churn_watch),
        "watch_latency_max": max(latencies),
        "watch_peak_rss_bytes": watch_rss,
        "watch_differences": differences,
        "shard_peak_rss_bytes": shard_rss,
    }


def _under_churn(run: Run, scrapes: int) -> list[float]:
    """Scrapes a second apart while claims change CHURN times a second."""
    run.api_get(f"/churn?rate={CHURN}")
    try:
        times = []
        for _ in range(scrapes):
            time.sleep(1.0)
            times.append(run.scrape())
        return times
    finally:
        run.api_get("/churn?rate=0")


def _parity(listing: Run, watching: Run, tries: int = 3) -> list[str]:
    """The DRA samples one mode writes and the other does not, once churn has stopped.

    A watch may be an event or two behind the list just made: asked again a few times.
    """
    differences: list[str] = []
    for _ in range(tries):
        listed, watched = _samples(listing.port), _samples(watching.port)
        differences = [f"- {line}" for line in sorted((listed - watched).elements())]
        differences += [f"+ {line}" for line in sorted((watched - listed).elements())]
        if not differences:
            break
        time.sleep(1.0)
    return differences


def _samples(port: int) -> collections.Counter[str]:
    """Each DRA sample line of one plain scrape (the exporter's own metrics left out)."""
    code, body = get(port, "/metrics")
    if code != 200:
        raise RuntimeError(f"scrape answered {code}: {body[:300]!r}")
    return collections.Counter(
        line
        for line in body.decode().splitlines()
        if line.startswith("kube_") and not line.startswith("kube_dra_exporter_")
    )


def _latency(run: Run, name: str) -> float:
    """Seconds from a new claim to the first scrape that shows it.

    Each scrape is read as Prometheus asks for it (gzip), inflated as it comes, and left once
    the claims' families are behind (families come sorted by name): reading whole 160 MiB
    bodies would make the poll, not the exporter, what is measured.
    """
    sent = json.loads(run.api_get(f"/probe?name={name}")[1])["sent"]
    needle = f'resourceclaim_name="{name}"'.encode()
    while not _shows(run.port, needle, PAST_CLAIMS):
        time.sleep(0.01)
    return time.time() - float(sent)


PAST_CLAIMS = b"\n# HELP kube_resourcepool_"
"""Where the claims' families end in a scrape."""


def _shows(port: int, needle: bytes, end: bytes) -> bool:
    """Whether a gzip scrape holds *needle* before *end*."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        connection.request("GET", "/metrics", headers=SCRAPE_HEADERS)
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"scrape answered {response.status}")
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        tail = b""
        while chunk := response.read(64 * 1024):
            text = tail + inflater.decompress(chunk)
            if needle in text:
                return True
            if end in text:
                return False
            tail = text[-max(len(needle), len(end)) :]
        return False
    finally:
        connection.close()


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    mib = 2**20
    shards = " / ".join(f"{rss / mib:.0f}" for rss in result["shard_peak_rss_bytes"])
    return "\n".join(
        [
            f"At {result['devices']:,} devices (median scrape, seconds):",
            "",
            "| | list mode | watch mode | watch ÷ list |",
            "|---|---:|---:|---:|",
            f"| calm cluster | {result['list_calm_median']:.3f} | "
            f"{result['watch_calm_median']:.3f} | "
            f"{result['watch_calm_median'] / result['list_calm_median']:.2f} |",
            f"| {CHURN} claim changes a second | {result['list_churn_median']:.3f} | "
            f"{result['watch_churn_median']:.3f} | "
            f"{result['watch_churn_median'] / result['list_churn_median']:.2f} |",
            f"| peak RSS (MiB) | {result['list_peak_rss_bytes'] / mib:.0f} | "
            f"{result['watch_peak_rss_bytes'] / mib:.0f} | "
            f"{result['watch_peak_rss_bytes'] / result['list_peak_rss_bytes']:.2f} |",
            "",
            f"Watch mode: synchronised in {result['watch_sync_seconds']:.1f} s, "
            f"{result['watch_requests_per_scrape']:g} API requests a scrape, "
            f"a change shown within {result['watch_latency_max']:.2f} s. "
            f"{SHARDS} shards' peak RSS (MiB): {shards}, at most "
            f"{max(result['shard_peak_rss_bytes']) / result['list_peak_rss_bytes']:.2f}x "
            "the unsharded exporter's.",
            "",
            _parity_line(result["watch_differences"]),
        ]
    )


def _parity_line(differences: list[str]) -> str:
    if not differences:
        return "After churn, watch mode wrote the samples list mode wrote, every one."
    shown = "; ".join(differences[:5])
    return f"After churn, {len(differences)} samples differ between the modes: {shown}"


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """Watch mode's and sharding's targets, and whether each is met."""
    size = f"{result['devices']:,} devices"
    return [
        (
            f"{size}: watch mode, calm cluster: median scrape <= 0.05x list mode's",
            result["watch_calm_median"] <= 0.05 * result["list_calm_median"],
        ),
        (
            f"{size}: watch mode, calm cluster: no API request a scrape",
            result["watch_requests_per_scrape"] == 0,
        ),
        (
            f"{size}: watch mode, {CHURN} changes a second: median scrape <= 0.1x list mode's",
            result["watch_churn_median"] <= 0.1 * result["list_churn_median"],
        ),
        (f"{size}: watch mode: a change shown within 1 s", result["watch_latency_max"] <= 1.0),
        (
            f"{size}: after churn, watch mode writes the samples list mode writes",
            not result["watch_differences"],
        ),
        (
            f"{size}: watch mode: peak RSS <= 0.8x list mode's",
            result["watch_peak_rss_bytes"] <= 0.8 * result["list_peak_rss_bytes"],
        ),
        (
            f"{size}: each of {SHARDS} shards' peak RSS <= 0.35x the unsharded exporter's",
            max(result["shard_peak_rss_bytes"]) <= 0.35 * result["list_peak_rss_bytes"],
        ),
    ]
