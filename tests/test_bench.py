"""The benchmark runs end to end at its smallest size (a smoke test: no timing is asserted)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent


def test_benchmark_smoke(tmp_path: Path) -> None:
    """1,000 devices: the table, the JSON and the plot are written; list counts add up.

    Watch mode and four shards, pending claims and the Pod view are measured at that size too;
    upstream's DRA scale job at 800 devices (100 nodes, as upstream's smallest job).
    """
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.run",
            "--sizes",
            "1000",
            "--scrapes",
            "2",
            "--watch-size",
            "1000",
            "--scale-job-size",
            "800",
            "--diagnosis-size",
            "1000",
            "--pods-size",
            "1000",
            "--nodes-size",
            "1000",
            "--renewal-size",
            "1000",
            "--undated-size",
            "1000",
            "--secured-size",
            "0",
            "--no-rest",
            "--json",
            str(tmp_path / "results.json"),
            "--plot",
            str(tmp_path / "results.png"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("| devices | claims |")
    assert "| 1,000 | 500 |" in result.stdout
    measured = json.loads((tmp_path / "results.json").read_text())["results"][0]
    assert measured["devices"] == 1000
    assert measured["lists_per_scrape"] == 3
    assert measured["lists_during_40_concurrent"] == 3
    assert (tmp_path / "results.png").read_bytes().startswith(b"\x89PNG")
    watched = json.loads((tmp_path / "results.json").read_text())["watch"]
    assert watched["devices"] == 1000
    assert watched["watch_requests_per_scrape"] == 0
    assert watched["watch_differences"] == [], "after churn, watch mode wrote other samples"
    assert len(watched["shard_peak_rss_bytes"]) == 4
    assert "At 1,000 devices (median scrape, seconds):" in result.stdout
    scaled = json.loads((tmp_path / "results.json").read_text())["scale_job"]
    assert (scaled["devices"], scaled["claims"]) == (800, 720)
    assert scaled["lag_samples"] > 0 and scaled["short_jobs"] > 0
    assert 0 < scaled["lag_p50"] <= scaled["lag_p99"] <= scaled["lag_max"]
    assert "Upstream's DRA scale job at 800 devices: 720 claims" in result.stdout
    judged = json.loads((tmp_path / "results.json").read_text())["diagnosis"]
    assert judged["pending_reason_series"] > 0
    assert 0 < judged["list_first_cpu_fastest"] <= judged["list_first_cpu"]
    assert "collection at start, its CPU (s, fastest of 5)" in result.stdout
    assert judged["without_answers_list_first_cpu_fastest"] > 0
    assert "the families an operator acts on (kube_resourcepool_idle_hourly_cost" in result.stdout
    costed = json.loads((tmp_path / "results.json").read_text())["families"]
    assert costed["collection_cpu"] > 0
    assert costed["family_cpu"]["kube_resourcepool_idle_hourly_cost"] > 0
    assert costed["family_cpu"]["kube_resourceclaim_labels"] > 0, "the chargeback allowlist"
    assert "| `kube_resourceclaim_allocation_tainted` |" in result.stdout
    podded = json.loads((tmp_path / "results.json").read_text())["pods"]
    assert (podded["devices"], podded["pods"]) == (1000, 781)
    assert podded["pod_series"] > 0
    assert "without and with its 781 pods listed" in result.stdout
    viewed = json.loads((tmp_path / "results.json").read_text())["nodes"]
    assert (viewed["devices"], viewed["nodes"]) == (1000, 125)
    assert viewed["node_series"] > 0
    assert "without and with its 125 Nodes listed" in result.stdout
    renewed = json.loads((tmp_path / "results.json").read_text())["renewal"]
    assert renewed["after_small_scrape"] > 0 and renewed["read_again_healthz_max"] > 0
    assert renewed["original_children"] == 0, "the original's families started a CEL process"
    assert "every object changed again" in result.stdout
    undated = json.loads((tmp_path / "results.json").read_text())["undated"]
    assert undated["claims"] == 500 and undated["healthz_max_during_first_scrape"] > 0
    assert 0 < undated["log_lines"] < 100, "a line for each claim without creationTimestamp"
    assert "500 claims without creationTimestamp:" in result.stdout
    assert renewed["shaped_scrape"] > 0 and renewed["shaped_start_healthz_max"] > 0
    assert "H100 fleet: every object new, after a 20-slice cluster" in result.stdout
    assert "while an H100 fleet's objects are all new" in result.stdout


def test_tls_and_the_auth_filter_measured(tmp_path: Path) -> None:
    """1,000 devices scraped plain and over TLS behind --auth-filter, alone: warm, no review."""
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--sizes", ""]
        + [
            f"--{name}-size={size}"
            for name, size in (
                ("watch", 0),
                ("scale-job", 0),
                ("diagnosis", 0),
                ("pods", 0),
                ("nodes", 0),
                ("renewal", 0),
                ("undated", 0),
                ("secured", 1000),
            )
        ]
        + ["--json", str(tmp_path / "results.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    measured = json.loads((tmp_path / "results.json").read_text())["secured"]
    assert measured["devices"] == 1000
    for mode in ("list", "watch"):
        assert measured[f"plain_{mode}_calm_median"] > 0
        assert measured[f"secured_{mode}_calm_median"] > 0
        assert measured[f"reviews_during_{mode}_calm_scrapes"] == 0
    assert "| watch mode |" in result.stdout
    assert "calm scrapes with --auth-filter, cache warm, send no review" in result.stdout


def test_the_fake_api_speaks_https_and_asks_for_the_token(tmp_path: Path) -> None:
    """As every API server: a list over HTTPS, refused 401 without the bearer token."""
    from benchmarks.processes import TOKEN, ApiTls, free_port

    tls, port = ApiTls.made(tmp_path), free_port()
    environment = {**os.environ, "FAKEAPI_CERT": str(tls.served), "FAKEAPI_TOKEN": TOKEN}
    with subprocess.Popen(
        [sys.executable, "-m", "benchmarks.fakeapi", "1", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
    ) as api:
        try:
            assert api.stdout is not None and api.stdout.readline().strip() == "ready"
            path = "/apis/resource.k8s.io/v1/resourceslices?limit=1"
            context = tls.context()
            for headers, code in (({}, 401), ({"Authorization": f"Bearer {TOKEN}"}, 200)):
                connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)
                connection.request("GET", path, headers=headers)
                answer = connection.getresponse()
                assert (answer.status, answer.read()[:1]) == (code, b"{")
                connection.close()
        finally:
            api.terminate()


def test_family_costs_read_lists_by_pages() -> None:
    """The in-process first collection takes its lists a page at a time, as the exporter does.

    More claims than one response may hold (an object counted per 4 KiB of the response bound:
    16,384 by default), as at 64,000 devices: read as one page, the reader refuses them.
    """
    import msgspec

    from benchmarks import familycost
    from kdraexp.cel.matching import Matcher
    from kdraexp.dra.listing import DEFAULT_MAX_RESPONSE_BYTES
    from kdraexp.store.reader import OBJECT_BYTES

    count = DEFAULT_MAX_RESPONSE_BYTES // OBJECT_BYTES + 1
    claims = [
        msgspec.Raw(
            msgspec.json.encode(
                {
                    "metadata": {"name": f"c{i}", "namespace": "bench", "uid": f"u{i}"},
                    "spec": {"devices": {"requests": []}},
                }
            )
        )
        for i in range(count)
    ]
    matcher = Matcher()
    try:
        familycost._collect({"resourceclaims": claims}, matcher, familycost.NO_ALLOWLISTS)
    finally:
        matcher.close()
