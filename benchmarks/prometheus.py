"""What a Prometheus holds for the exporter: its head series and its memory, by cluster size.

The cluster of ``make bench`` at each size, the exporter in list mode on the fake API, scraped
by a real Prometheus 3 (the one the end-to-end tier builds) every :data:`INTERVAL` seconds
until it has :data:`SCRAPES` scrapes: its head series (``prometheus_tsdb_head_series``) and
memory (its peak RSS, ``process_resident_memory_bytes`` and ``go_memstats_heap_inuse_bytes``)
read from its own ``/metrics``, beside a Prometheus that scrapes nothing for as long. Then the
largest size again with ``--metric-denylist`` of :data:`DROPPED`, and the series each family
writes. Not part of ``make bench``; run it under the heavy lock:
``python -m benchmarks.prometheus [DEVICES ...]`` (16,000 and 64,000 by default).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.processes import Run, free_port, wait_for

INTERVAL = 10
"""Seconds between two scrapes (a 64,000-device scrape is ingested in a few)."""
SCRAPES = 6
"""Scrapes each Prometheus makes before it is measured: the head then holds every series."""
DROPPED = (
    "kube_resourceslice_device_capacity$",
    "kube_resourceslice_device_class$",
    "kube_resourceslice_device_info$",
    "kube_resourceslice_device_state$",
    "kube_resourceclaim_hourly_cost$",
    "kube_resourceclaim_status_allocation_timestamp_seconds$",
)
"""Per-device families no alert of the chart reads (its dashboard's device panels do), a claim's
cost (its chargeback rules) and allocation time (``DRADeviceBindingSlow``): none of the
original's seven, and the largest of the rest."""


def prometheus_binary() -> Path:
    """Prometheus 3, as scripts/build-prometheus.sh built it (or builds it now)."""
    from tests.tools import prometheus3

    return prometheus3() / "prometheus"


class Prometheus:
    """A Prometheus scraping *targets* (host:port) every :data:`INTERVAL` seconds."""

    def __init__(self, binary: Path, directory: Path, targets: list[str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": f"{INTERVAL}s", "scrape_timeout": f"{INTERVAL}s"},
            "scrape_configs": (
                [{"job_name": "kdraexp", "static_configs": [{"targets": targets}]}]
                if targets
                else []
            ),
        }
        (directory / "prometheus.yml").write_text(json.dumps(config))
        self.port = free_port()
        self.started = time.monotonic()
        with (directory / "prometheus.log").open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={directory / 'prometheus.yml'}",
                    f"--storage.tsdb.path={directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: self.own() != {}, 60, "Prometheus serving")

    def own(self) -> dict[str, float]:
        """Its own metrics without labels, by name."""
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
        return {
            name: float(value)
            for name, _, value in (line.partition(" ") for line in text.splitlines())
            if name and not name.startswith("#") and "{" not in name
        }

    def query(self, promql: str) -> float:
        """The one value of an instant query; 0 for none."""
        query = urllib.parse.urlencode({"query": promql})
        url = f"http://127.0.0.1:{self.port}/api/v1/query?{query}"
        with urllib.request.urlopen(url, timeout=30) as response:
            result = json.load(response)["data"]["result"]
        return float(result[0]["value"][1]) if result else 0.0

    def scrapes(self) -> int:
        """Scrapes of the exporter that succeeded so far."""
        return int(self.query('sum(sum_over_time(up{job="kdraexp"}[1h]))'))

    def peak_rss(self) -> int:
        """Its peak resident memory so far, bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmHWM")

    def stop(self) -> None:
        """Stop it."""
        self.process.terminate()
        self.process.wait(timeout=60)


def measured(prometheus: Prometheus) -> dict[str, float]:
    """What it holds now: head series, peak and current RSS, heap in use."""
    own = prometheus.own()
    return {
        "scrapes": prometheus.scrapes(),
        "scrape_seconds": prometheus.query(
            'max(max_over_time(scrape_duration_seconds{job="kdraexp"}[1h]))'
        ),
        "head_series": own["prometheus_tsdb_head_series"],
        "peak_rss": prometheus.peak_rss(),
        "rss": own["process_resident_memory_bytes"],
        "heap_inuse": own["go_memstats_heap_inuse_bytes"],
        "seconds": time.monotonic() - prometheus.started,
    }


def scraping(binary: Path, directory: Path, devices: int, args: list[str]) -> dict[str, Any]:
    """A Prometheus scraping the exporter of a *devices*-device cluster, *args* its options."""
    run = Run(devices, directory / "exporter", args)
    try:
        families = run.series()
        prometheus = Prometheus(binary, directory / "prometheus", [f"127.0.0.1:{run.port}"])
        try:
            deadline = time.monotonic() + INTERVAL * SCRAPES * 4
            while prometheus.scrapes() < SCRAPES:  # asked once a second: no load of its own
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{SCRAPES} scrapes not within {INTERVAL * SCRAPES * 4}s")
                time.sleep(1)
            figures = measured(prometheus)
        finally:
            prometheus.stop()
    finally:
        run.stop()
    return {**figures, "devices": devices, "families": families, "series": sum(families.values())}


def idle(binary: Path, directory: Path, seconds: float) -> dict[str, float]:
    """A Prometheus scraping nothing, measured after *seconds*."""
    prometheus = Prometheus(binary, directory, [])
    try:
        time.sleep(seconds)
        return measured(prometheus)
    finally:
        prometheus.stop()


def measure(sizes: list[int], directory: Path) -> dict[str, Any]:
    """Every figure: each size with every default family, the largest without :data:`DROPPED`.

    And a Prometheus scraping nothing for as long as the largest size's, to subtract.
    """
    binary = prometheus_binary()
    runs = [scraping(binary, directory / str(size), size, []) for size in sizes]
    denylist = ["--metric-denylist", ",".join(DROPPED)]
    dropped = scraping(binary, directory / "dropped", sizes[-1], denylist)
    return {
        "idle": idle(binary, directory / "idle", runs[-1]["seconds"]),
        "runs": runs,
        "dropped": dropped,
        "denylist": ",".join(DROPPED),
    }


def table(result: dict[str, Any]) -> str:
    """The figures as markdown tables."""
    mib = 2**20
    idle = result["idle"]
    lines = [
        f"A Prometheus scraping nothing: {idle['head_series']:,.0f} head series, peak RSS"
        f" {idle['peak_rss'] / mib:.0f} MiB.",
        "",
        "| devices | denylist | exporter series | scrapes (slowest, s) | head series | head series"
        " per device | peak RSS (MiB) | RSS (MiB) | heap in use (MiB) | peak RSS above idle per"
        " 1,000 devices (MiB) | per head series (bytes) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run, denied in [*((run, "") for run in result["runs"]), (result["dropped"], "yes")]:
        above = run["peak_rss"] - idle["peak_rss"]
        lines.append(
            f"| {run['devices']:,} | {denied} | {run['series']:,} | {run['scrapes']}"
            f" ({run['scrape_seconds']:.2f}) | {run['head_series']:,.0f}"
            f" | {run['head_series'] / run['devices']:.1f} | {run['peak_rss'] / mib:.0f}"
            f" | {run['rss'] / mib:.0f} | {run['heap_inuse'] / mib:.0f}"
            f" | {above / mib / run['devices'] * 1000:.1f}"
            f" | {above / (run['head_series'] - idle['head_series']):.0f} |"
        )
    runs = result["runs"]
    if len(runs) > 1:
        first, last = runs[0], runs[-1]
        slope = (last["peak_rss"] - first["peak_rss"]) / (last["devices"] - first["devices"])
        lines += [
            "",
            f"Peak RSS from {first['devices']:,} to {last['devices']:,} devices:"
            f" {slope * 1000 / mib:.1f} MiB per 1,000 devices.",
        ]
    largest = runs[-1]
    lines += [
        "",
        f"Dropped with --metric-denylist '{result['denylist']}': head series"
        f" {result['dropped']['head_series'] / largest['head_series']:.2f}x, peak RSS"
        f" {result['dropped']['peak_rss'] / largest['peak_rss']:.2f}x.",
        "",
        f"| family | series at {largest['devices']:,} devices | share |",
        "|---|---:|---:|",
    ]
    for name, count in sorted(largest["families"].items(), key=lambda item: -item[1]):
        lines.append(f"| `{name}` | {count:,} | {count / largest['series']:.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    chosen = [int(size) for size in sys.argv[1:]] or [16000, 64000]
    with tempfile.TemporaryDirectory() as scratch:
        result = measure(chosen, Path(scratch))
    print(json.dumps(result, indent=1), file=sys.stderr)
    print(table(result))
