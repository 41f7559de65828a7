"""Measure the installed exporter against the floor, for clusters of growing size.

``python -m benchmarks.run [--sizes 1000,4000,16000,64000] [--scrapes 5]`` prints markdown
tables, writes ``--json`` and ``--plot`` files, and checks the targets (``--check``): at 16k
devices the median scrape within 1.5x the floor and peak RSS within 128 MiB; 40 concurrent
scrapes making one set of list calls, and adding at most one body's size to the peak RSS, plain
or gzip; /healthz within 100 ms while the collection made at start runs and during scrapes at
every size; scrapes growing with the cluster as the floor does (linear); from 16k devices the
first scrape after start (the exporter ready) within 2x a calm one.  Watch mode and shards,
upstream's DRA scale job (``scalejob``), pending claims, each family's cost, the Pod and Node
views, scrapes of objects all new, claims without a creation time and scrapes over TLS behind
the auth filter (``secured``) are measured by the modules named after them (``--*-size`` 0
leaves one out).

Scrapes ask what Prometheus asks: the text format, gzip-compressed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import (
    diagnosis,
    familycost,
    nodeview,
    pods,
    renewal,
    scalejob,
    secured,
    undated,
    watching,
)
from benchmarks.cluster import DEVICES_PER_NODE
from benchmarks.processes import SCRAPE_HEADERS, Run

CONNECTION_ALLOWANCE = 40 * 256 * 1024
"""What forty connections may hold whatever the body: each a few 64 KiB pieces and an
inflater, which a small cluster's body can be smaller than."""


def measure(
    devices: int, scrapes: int, directory: Path, exporter_args: list[str]
) -> dict[str, Any]:
    """Every figure for one cluster size."""
    run = Run(devices, directory, exporter_args)
    try:
        cpu = run.cpu()
        # The first scrape after start: the collection made at start read and rendered it all.
        healthz_first, first = run.healthz_during_scrape()
        first_cpu = run.cpu() - cpu
        before, cpu = run.list_requests(), run.cpu()
        times = [run.scrape() for _ in range(scrapes)]
        warm_cpu = (run.cpu() - cpu) / scrapes
        per_scrape = (run.list_requests() - before) / scrapes
        healthz_warm, _ = run.healthz_during_scrape()
        burst = run.concurrent()
        floors = [run.floor() for _ in range(scrapes)]
        rss = run.peak_rss()
        series = run.series()
        plain_body, gzip_body = run.body_sizes()
        plain_burst = run.memory_burst({"Accept": SCRAPE_HEADERS["Accept"]})
        gzip_burst = run.memory_burst(SCRAPE_HEADERS)
    finally:
        run.stop()
    return {
        "devices": run.nodes * DEVICES_PER_NODE,
        "nodes": run.nodes,
        "claims": run.nodes * DEVICES_PER_NODE // 2,
        "start": run.start_seconds,
        "start_cpu": run.start_cpu,
        "scrape_first": first,
        "cpu_first": first_cpu,
        "cpu_per_scrape": warm_cpu,
        "scrape_min": min(times),
        "scrape_median": statistics.median(times),
        "scrape_max": max(times),
        "floor_median": statistics.median(floors),
        "ratio": statistics.median(times) / statistics.median(floors),
        "peak_rss_bytes": rss,
        "lists_per_scrape": per_scrape,
        "lists_during_40_concurrent": burst,
        "healthz_max_during_start": run.healthz_while_starting,
        "healthz_max_during_first_scrape": healthz_first,
        "healthz_max_during_scrape": healthz_warm,
        "series": series,
        "body_plain_bytes": plain_body,
        "body_gzip_bytes": gzip_body,
        "rss_added_by_40_plain_bytes": plain_burst,
        "rss_added_by_40_gzip_bytes": gzip_burst,
    }


def table(results: list[dict[str, Any]]) -> str:
    """Time and CPU, as a markdown table."""
    lines = [
        "| devices | claims | ready after (s) | its CPU (s) | first scrape (s) "
        "| scrape min / median / max (s) | CPU per scrape (s) | floor (s) | median ÷ floor "
        "| first ÷ median | lists per scrape | lists for 40 concurrent "
        "| /healthz max, start / first / later scrape (ms) |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['devices']:,} | {r['claims']:,} | {r['start']:.3f} | {r['start_cpu']:.2f} | "
            f"{r['scrape_first']:.3f} | "
            f"{r['scrape_min']:.3f} / {r['scrape_median']:.3f} / {r['scrape_max']:.3f} | "
            f"{r['cpu_per_scrape']:.2f} | {r['floor_median']:.3f} | {r['ratio']:.2f} | "
            f"{r['scrape_first'] / r['scrape_median']:.2f} | "
            f"{r['lists_per_scrape']:g} | {r['lists_during_40_concurrent']} | "
            f"{r['healthz_max_during_start'] * 1000:.0f} / "
            f"{r['healthz_max_during_first_scrape'] * 1000:.0f} / "
            f"{r['healthz_max_during_scrape'] * 1000:.0f} |"
        )
    return "\n".join(lines)


def memory_table(results: list[dict[str, Any]]) -> str:
    """Memory, as a markdown table."""
    mib = 2**20
    lines = [
        "| devices | series | peak RSS (MiB) | body plain / gzip (MiB) "
        "| added by 40 concurrent scrapes, plain / gzip (MiB) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['devices']:,} | {sum(r['series'].values()):,} | "
            f"{r['peak_rss_bytes'] / mib:.1f} | "
            f"{r['body_plain_bytes'] / mib:.1f} / {r['body_gzip_bytes'] / mib:.1f} | "
            f"{r['rss_added_by_40_plain_bytes'] / mib:.1f} / "
            f"{r['rss_added_by_40_gzip_bytes'] / mib:.1f} |"
        )
    return "\n".join(lines)


def series_table(results: list[dict[str, Any]]) -> str:
    """Series per family at each size, as a markdown table."""
    names = sorted({name for r in results for name in r["series"]})
    lines = [
        "| family | " + " | ".join(f"{r['devices']:,} devices" for r in results) + " |",
        "|---|" + "---:|" * len(results),
    ]
    for name in names:
        counts = " | ".join(f"{r['series'].get(name, 0):,}" for r in results)
        lines.append(f"| `{name}` | {counts} |")
    totals = " | ".join(f"**{sum(r['series'].values()):,}**" for r in results)
    lines.append(f"| all | {totals} |")
    return "\n".join(lines)


def targets(results: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Each target that the sizes measured allow checking, and whether it is met."""
    by_size = {r["devices"]: r for r in results}
    checks = [
        (
            f"{r['devices']:,} devices: 40 concurrent scrapes make one set of list calls",
            r["lists_during_40_concurrent"] == r["lists_per_scrape"],
        )
        for r in results
    ]
    if 16000 in by_size:
        r = by_size[16000]
        checks.append(("16,000 devices: median scrape <= 1.5x the floor", r["ratio"] <= 1.5))
        checks.append(
            (
                "16,000 devices: peak RSS with every child <= 128 MiB",
                r["peak_rss_bytes"] <= 128 * 2**20,
            )
        )
    for r in results:
        if r["devices"] >= 16000:  # smaller scrapes take milliseconds: a ratio of noise
            checks.append(
                (
                    f"{r['devices']:,} devices: the first scrape after start <= 2x a calm one",
                    r["scrape_first"] <= 2 * r["scrape_median"],
                )
            )
        slowest = max(
            r["healthz_max_during_start"],
            r["healthz_max_during_first_scrape"],
            r["healthz_max_during_scrape"],
        )
        checks.append(
            (
                f"{r['devices']:,} devices: /healthz within 100 ms at start and during scrapes",
                slowest <= 0.1,
            )
        )
        for form in ("plain", "gzip"):
            allowed = max(r["body_plain_bytes"], CONNECTION_ALLOWANCE)
            checks.append(
                (
                    f"{r['devices']:,} devices: 40 concurrent {form} scrapes add at most one "
                    "body's size (or the connections' buffers) to the peak RSS",
                    r[f"rss_added_by_40_{form}_bytes"] <= allowed,
                )
            )
    if 16000 in by_size and 64000 in by_size:
        small, large = by_size[16000], by_size[64000]
        floor_growth = large["floor_median"] / small["floor_median"]
        checks.append(
            (
                "cost linear in cluster size: 64,000 devices / 16,000 devices scrape within "
                f"1.25x of the floor's growth ({floor_growth:.1f}x)",
                large["scrape_median"] <= 1.25 * floor_growth * small["scrape_median"],
            )
        )
        checks.append(
            (
                "RSS grows sublinearly (64k / 16k < 4)",
                large["peak_rss_bytes"] < 4 * small["peak_rss_bytes"],
            )
        )
    return checks


def plot(results: list[dict[str, Any]], path: Path) -> None:
    """Plot scrape time, floor and peak RSS against devices into *path*."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devices = [r["devices"] for r in results]
    figure, latency = plt.subplots(figsize=(7, 4))
    latency.plot(devices, [r["scrape_median"] for r in results], "o-", label="scrape (median)")
    latency.plot(
        devices, [r["floor_median"] for r in results], "s--", label="floor: fetch + decode"
    )
    latency.set_xscale("log")
    latency.set_yscale("log")
    latency.set_xlabel("devices")
    latency.set_ylabel("seconds")
    memory = latency.twinx()
    memory.plot(
        devices,
        [r["peak_rss_bytes"] / 2**20 for r in results],
        "^:",
        color="tab:red",
        label="peak RSS",
    )
    memory.set_ylabel("peak RSS (MiB)")
    handles = latency.get_legend_handles_labels()[0] + memory.get_legend_handles_labels()[0]
    figure.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.12, 0.88))
    latency.set_title("kdraexp scrape time and memory against cluster size")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    """Measure every size, print and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000,16000,64000")
    parser.add_argument("--scrapes", type=int, default=5)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results.json"))
    parser.add_argument("--plot", type=Path, default=Path("benchmarks/results.png"))
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument(
        "--exporter-args", default="", help="more options for the exporter, e.g. opt-in families"
    )
    parser.add_argument(
        "--watch-size",
        type=int,
        default=64000,
        help="devices at which watch mode and sharding are measured (0: not measured)",
    )
    parser.add_argument(
        "--scale-job-size",
        type=int,
        default=40000,
        help="devices at which upstream's DRA scale job is replayed (0: not measured)",
    )
    parser.add_argument(
        "--diagnosis-size",
        type=int,
        default=64000,
        help="devices at which pending claims' cost is measured (0: not measured)",
    )
    parser.add_argument(
        "--renewal-size",
        type=int,
        default=64000,
        help="devices at which scrapes of objects all new are measured (0: not measured)",
    )
    parser.add_argument(
        "--no-rest",
        action="store_true",
        help="do not wait two minutes for an exporter at rest to end its CEL process",
    )
    parser.add_argument(
        "--pods-size",
        type=int,
        default=64000,
        help="devices at which the Pod view's cost is measured, with their pods (0: not measured)",
    )
    parser.add_argument(
        "--nodes-size",
        type=int,
        default=64000,
        help="devices at which the Node view's cost is measured, with its Nodes (0: none)",
    )
    parser.add_argument(
        "--undated-size",
        type=int,
        default=64000,
        help="devices at which claims without creationTimestamp are measured (0: not measured)",
    )
    parser.add_argument(
        "--secured-size",
        type=int,
        default=64000,
        help="devices at which scrapes over TLS behind --auth-filter are measured (0: none)",
    )
    args = parser.parse_args(argv)

    results = []
    watched: dict[str, Any] | None = None
    scaled: dict[str, Any] | None = None
    diagnosed: dict[str, Any] | None = None
    podded: dict[str, Any] | None = None
    viewed: dict[str, Any] | None = None
    costed: dict[str, Any] | None = None
    renewed: dict[str, Any] | None = None
    undated_run: dict[str, Any] | None = None
    secured_run: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as directory:
        for size in (int(s) for s in args.sizes.split(",") if s):
            results.append(measure(size, args.scrapes, Path(directory), args.exporter_args.split()))
            print(f"measured {results[-1]['devices']:,} devices", file=sys.stderr, flush=True)
        if args.watch_size:
            watched = watching.measure(args.watch_size, args.scrapes, Path(directory) / "watch")
            print("measured watch mode and sharding", file=sys.stderr, flush=True)
        if args.scale_job_size:
            scaled = scalejob.measure(args.scale_job_size, args.scrapes, Path(directory) / "job")
            print("measured upstream's DRA scale job", file=sys.stderr, flush=True)
        if args.diagnosis_size:
            diagnosed = diagnosis.measure(
                args.diagnosis_size, args.scrapes, Path(directory) / "diagnosis"
            )
            print("measured pending claims' cost", file=sys.stderr, flush=True)
            costed = familycost.measure(args.diagnosis_size, diagnosis.PENDING)
            print("measured each family's cost", file=sys.stderr, flush=True)
        if args.pods_size:
            podded = pods.measure(args.pods_size, args.scrapes, Path(directory) / "pods")
            print("measured the Pod view's cost", file=sys.stderr, flush=True)
        if args.nodes_size:
            viewed = nodeview.measure(args.nodes_size, args.scrapes, Path(directory) / "nodes")
            print("measured the Node view's cost", file=sys.stderr, flush=True)
        if args.renewal_size:
            renewed = renewal.measure(
                args.renewal_size, args.scrapes, Path(directory) / "renewal", not args.no_rest
            )
            print("measured scrapes of objects all new, and at rest", file=sys.stderr, flush=True)
        if args.undated_size:
            undated_run = undated.measure(args.undated_size, Path(directory) / "undated")
            print("measured claims without creationTimestamp", file=sys.stderr, flush=True)
        if args.secured_size:
            secured_run = secured.measure(args.secured_size, Path(directory) / "secured")
            print("measured scrapes over TLS behind the auth filter", file=sys.stderr, flush=True)
    if results:
        print(table(results))
        print()
        print(memory_table(results))
        print()
        print(series_table(results))
        print()
    checks = targets(results)
    if watched is not None:
        print(watching.table(watched))
        print()
        checks += watching.targets(watched)
    if scaled is not None:
        print(scalejob.table(scaled))
        print()
        checks += scalejob.targets(scaled)
    if diagnosed is not None:
        print(diagnosis.table(diagnosed))
        print()
        checks += diagnosis.targets(diagnosed)
    if costed is not None:
        assert diagnosed is not None  # measured together
        print(familycost.table(costed, diagnosed["pending_list_first_cpu"]))
        print()
        checks += familycost.targets(costed, diagnosed["pending_list_first_cpu"])
    if podded is not None:
        print(pods.table(podded))
        print()
        checks += pods.targets(podded)
    if viewed is not None:
        print(nodeview.table(viewed))
        print()
        checks += nodeview.targets(viewed)
    if renewed is not None:
        print(renewal.table(renewed))
        print()
        checks += renewal.targets(renewed)
    if undated_run is not None:
        print(undated.table(undated_run))
        print()
        checks += undated.targets(undated_run)
    if secured_run is not None:
        print(secured.table(secured_run))
        print()
        checks += secured.targets(secured_run)
    for name, ok in checks:
        print(f"- {'met' if ok else 'MISSED'}: {name}")
    args.json.write_text(
        json.dumps(
            {
                "results": results,
                "watch": watched,
                "scale_job": scaled,
                "diagnosis": diagnosed,
                "pods": podded,
                "nodes": viewed,
                "families": costed,
                "renewal": renewed,
                "undated": undated_run,
                "secured": secured_run,
                "targets": dict(checks),
            },
            indent=2,
        )
        + "\n"
    )
    if results:
        plot(results, args.plot)
    return 1 if args.check and not all(ok for _, ok in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
