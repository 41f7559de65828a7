"""Upstream's DRA scale job replayed against watch mode, and list mode of the same cluster.

The fake API starts with no claim and plays :mod:`benchmarks.jobs`: a fill to 90% of the devices
with one-GPU long-running claims at :data:`FILL_RATE` a second, then one-GPU jobs of 30 seconds
at :data:`CHURN_RATE` a second, every step of every claim a watch event.  Watch mode is measured
throughout: its CPU over the fill's first half, scraped as Prometheus would scrape it; from then
on the time from a change to the first scrape that shows it, for each step of a probe claim's
life, one claim after another, while the fill and then the churn go on; scrapes during churn.
Then an exporter in list mode, started on the same cluster while it churns: its scrapes and its
peak RSS.
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
import zlib
from pathlib import Path
from typing import Any

from benchmarks.jobs import STATES, STEPS
from benchmarks.processes import SCRAPE_HEADERS, Run

FILL_RATE = 50.0
"""Long-running claims created a second (upstream: 10 at 100 nodes, 50 at 500 and 5,000)."""
CHURN_RATE = 5.0
"""Short jobs started a second, as upstream's steady state."""
SCRAPE_INTERVAL = 10.0
"""Seconds between the scrapes made while the fill's CPU is measured."""
CHURN_SECONDS = 60.0
"""Seconds of churn during which changes are probed (short jobs live 30)."""


def measure(devices: int, scrapes: int, directory: Path) -> dict[str, Any]:
    """Every figure, for a cluster of *devices* devices."""
    watching = Run(devices, directory / "watch", ["--mode", "watch"], claims=False)
    runs = [watching]
    try:
        synced = watching.start_seconds
        watching.api_get(f"/job?rate={FILL_RATE:g}&churn={CHURN_RATE:g}")
        fill = _job(watching)["fill"]
        fill_cpu = _fill_cpu(watching, fill / FILL_RATE / 2)
        fill_lags: list[float] = []
        while not _job(watching)["filled"]:
            fill_lags += _probe(watching, f"probe-fill-{len(fill_lags):05d}")
        churn_lags: list[float] = []
        ends = time.monotonic() + CHURN_SECONDS
        while time.monotonic() < ends:
            churn_lags += _probe(watching, f"probe-churn-{len(churn_lags):05d}")
        churn_watch = _scrapes(watching, scrapes)
        watch_rss = watching.peak_rss()
        listing = Run(devices, directory / "list", [], api=watching)
        runs.append(listing)
        listing.scrape()
        churn_list = _scrapes(listing, scrapes)
        list_rss = listing.peak_rss()
        short = _job(watching)["short"]
    finally:
        for run in reversed(runs):
            run.stop()
    lags = fill_lags + churn_lags
    return {
        "devices": devices,
        "claims": fill,
        "fill_rate": FILL_RATE,
        "churn_rate": CHURN_RATE,
        "short_jobs": short,
        "watch_sync_seconds": synced,
        "fill_cpu_cores": fill_cpu,
        "lag_samples": len(lags),
        "lag_fill_p99": percentile(fill_lags, 99),
        "lag_churn_p99": percentile(churn_lags, 99),
        "lag_p50": percentile(lags, 50),
        "lag_p99": percentile(lags, 99),
        "lag_max": max(lags),
        "watch_churn_median": statistics.median(churn_watch),
        "list_churn_median": statistics.median(churn_list),
        "watch_peak_rss_bytes": watch_rss,
        "list_peak_rss_bytes": list_rss,
    }


def _job(run: Run) -> dict[str, Any]:
    """How far the scale job got (see benchmarks.fakeapi)."""
    state: dict[str, Any] = json.loads(run.api_get("/jobstate")[1])
    return state


def _fill_cpu(run: Run, seconds: float) -> float:
    """Cores the exporter used over *seconds* of the fill, scraped every SCRAPE_INTERVAL."""
    used, start = run.cpu(), time.monotonic()
    ends = start + seconds
    while (now := time.monotonic()) < ends:
        run.scrape()
        time.sleep(max(0.0, min(SCRAPE_INTERVAL - (time.monotonic() - now), ends - now)))
    return (run.cpu() - used) / (time.monotonic() - start)


def _probe(run: Run, name: str) -> list[float]:
    """Seconds from each step of claim *name*'s life to the first scrape that shows it."""
    lags = []
    for step in STEPS:
        sent = float(json.loads(run.api_get(f"/step?name={name}&step={step}")[1])["sent"])
        lags.append(shown_after(run.port, name, STATES[step], sent))
    return lags


SHOWN = 120.0
"""Seconds a change may take to show before the measurement gives up."""


def shown_after(port: int, name: str, state: str | None, sent: float) -> float:
    """Seconds from *sent* (``time.time()``) until a scrape shows claim *name* in *state*."""
    while claim_state(port, name) != state:
        if time.time() - sent > SHOWN:
            raise RuntimeError(f"claim {name} not {state or 'gone'} after {SHOWN:g} s")
        time.sleep(0.01)
    return time.time() - sent


def _scrapes(run: Run, count: int) -> list[float]:
    """*count* scrapes a second apart, each one's seconds."""
    times = []
    for _ in range(count):
        time.sleep(1.0)
        times.append(run.scrape())
    return times


PAST_CLAIMS = b"# HELP kube_resourcepool_"
"""Where the claims' families end in a scrape (families come sorted by name)."""


def claim_state(port: int, name: str) -> str | None:
    """Claim *name*'s ``kube_resourceclaim_status_state`` in a gzip scrape; None: no sample.

    The scrape is inflated as it comes and left once the claims' families are behind.
    """
    needle = f'resourceclaim_name="{name}",state="'.encode()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        connection.request("GET", "/metrics", headers=SCRAPE_HEADERS)
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"scrape answered {response.status}")
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        text = b""
        while chunk := response.read(64 * 1024):
            complete, _, text = (text + inflater.decompress(chunk)).rpartition(b"\n")
            found = complete.find(needle)
            if found >= 0:
                start = found + len(needle)
                return complete[start : complete.index(b'"', start)].decode()
            if PAST_CLAIMS in complete:
                return None
        return None
    finally:
        connection.close()


def percentile(values: list[float], percent: int) -> float:
    """The *percent* th percentile of *values* (the value itself for one)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


def table(result: dict[str, Any]) -> str:
    """The figures as a markdown table."""
    mib = 2**20
    return "\n".join(
        [
            f"Upstream's DRA scale job at {result['devices']:,} devices: "
            f"{result['claims']:,} claims filled at {result['fill_rate']:g} a second, then "
            f"{result['churn_rate']:g} short jobs a second ({result['short_jobs']:,} started):",
            "",
            "| | watch mode | list mode | watch ÷ list |",
            "|---|---:|---:|---:|",
            f"| median scrape during churn (s) | {result['watch_churn_median']:.3f} | "
            f"{result['list_churn_median']:.3f} | "
            f"{result['watch_churn_median'] / result['list_churn_median']:.2f} |",
            f"| peak RSS (MiB) | {result['watch_peak_rss_bytes'] / mib:.0f} | "
            f"{result['list_peak_rss_bytes'] / mib:.0f} | "
            f"{result['watch_peak_rss_bytes'] / result['list_peak_rss_bytes']:.2f} |",
            "",
            f"Watch mode: synchronised in {result['watch_sync_seconds']:.1f} s; "
            f"{result['fill_cpu_cores']:.2f} cores during the fill; a change shown in a "
            f"scrape within {result['lag_p50']:.2f} s (p50), {result['lag_p99']:.2f} s (p99: "
            f"{result['lag_fill_p99']:.2f} s during the fill, {result['lag_churn_p99']:.2f} s "
            f"during churn), {result['lag_max']:.2f} s at most, of "
            f"{result['lag_samples']:,} changes.",
        ]
    )


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """The scale job's targets, and whether each is met."""
    size = f"scale job, {result['devices']:,} devices"
    return [
        (f"{size}: watch mode, a change shown within 1 s (p99)", result["lag_p99"] <= 1.0),
        (
            f"{size}: watch mode, at most half a core during the fill",
            result["fill_cpu_cores"] <= 0.5,
        ),
        (
            f"{size}: watch mode, median scrape during churn <= 0.1x list mode's",
            result["watch_churn_median"] <= 0.1 * result["list_churn_median"],
        ),
        (
            f"{size}: watch mode, peak RSS <= 0.8x list mode's",
            result["watch_peak_rss_bytes"] <= 0.8 * result["list_peak_rss_bytes"],
        ),
    ]
