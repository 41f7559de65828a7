"""Every label and annotation published, in the chart's memory limit, over the fake HTTPS API.

``--metric-labels-allowlist resourceclaims=[*]`` and ``--metric-annotations-allowlist
resourceclaims=[*]``, the README's own form, against what the API server may hold: claims as
``kubectl apply`` writes them (six labels, a 3 KB ``kubectl.kubernetes.io/last-applied-
configuration``), and claims of one legal 250 KB annotation.  Every value was held in full, and
the raw map again as a cache key: the first scrape was killed in 192 MiB.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import threads

from kdraexp.families.allowlist import LAST_APPLIED, MAX_VALUE_LENGTH
from tests.kubeconfigs import write_kubeconfig
from tests.objects import new_claim
from tests.processes import (
    CHART_LIMIT,
    MemoryCgroup,
    free_port,
    listeners,
    memory,
    memory_cgroup,
    scrape_blocking,
    start,
    stop,
    wait_for,
)
from tests.tlsapi import serve

pytestmark = pytest.mark.slow
TOKEN = "allowlist-token"
CUT_COUNT = (
    'kube_dra_exporter_truncated_values_total{field="metadata.annotations",'
    'resource="resourceclaims"} '
)
EVERY_KEY = [
    *("--metric-labels-allowlist", "resourceclaims=[*]"),
    *("--metric-annotations-allowlist", "resourceclaims=[*]"),
]


def applied(n: int) -> dict[str, Any]:
    """Claim *n* as ``kubectl apply`` leaves it: six labels and its last applied form (3 KB)."""
    labels = {
        "app.kubernetes.io/name": "trainer",
        "app.kubernetes.io/instance": f"trainer-{n % 50}",
        "app.kubernetes.io/part-of": "ml-platform",
        "app.kubernetes.io/managed-by": "kubectl",
        "team": f"team-{n % 20}",
        "cost-center": f"cc-{n % 7}",
    }
    claim = new_claim(f"c{n}", labels=labels)
    written = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"c{n}", "namespace": "workloads", "labels": labels},
        "spec": claim["spec"],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{n}-{i:04d}"} for i in range(80)],
    }
    claim["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(written)}
    return claim


def noted(n: int) -> dict[str, Any]:
    """Claim *n* with one annotation of 250 KB, within what the API server stores (256 KiB)."""
    return new_claim(f"c{n}", annotations={"example.com/notes": f"{n:06d}" + "x" * 250_000})


@pytest.fixture
def chart_limit() -> Iterator[MemoryCgroup]:
    yield from memory_cgroup("allowlists", CHART_LIMIT)


@pytest.mark.parametrize(
    ("claims", "make", "args"),
    [(25_000, applied, []), (400, noted, ["--page-size", "100"])],
    ids=["applied", "noted"],
)
@pytest.mark.timeout(600)
@pytest_twisted.ensureDeferred
async def test_every_key_published_fits_the_chart_memory_limit(
    chart_limit: MemoryCgroup, tmp_path: Path, claims: int, make: Any, args: list[str]
) -> None:
    """The first scrape answers in 192 MiB, with every value cut to the bound and counted.

    Before, 25,000 applied claims were killed at the first scrape (7.5 KiB a claim), and 400
    claims of 250 KB at once.
    """
    with serve() as api:
        api.fake.tokens = {TOKEN}
        for n in range(claims):
            api.fake.add("resourceclaims", make(n))
        config = write_kubeconfig(tmp_path / "kubeconfig", api.server, api.ca_pem, {"token": TOKEN})
        port, telemetry = free_port(), free_port()
        process = start(
            [*listeners(port, telemetry), "--timeout", "120", *EVERY_KEY, *args],
            tmp_path,
            {"KUBECONFIG": str(config)},
            via_twistd=True,
            cgroup=chart_limit,
        )
        try:
            started = time.monotonic()
            answer = await wait_for(
                lambda: process.poll() is not None or threads.deferToThread(_answered, port),
                limit=300,
            )
            assert process.poll() is None, (tmp_path / "output.log").read_text()[-2000:]
            code, body = answer
            peak = memory(process.pid)["VmHWM"]
            print(
                f"{claims} claims: peak RSS {peak / 2**20:.1f} MiB, "
                f"{time.monotonic() - started:.1f} s to the first answer"
            )
            assert code == 200, body[:2000]
            own = (await threads.deferToThread(scrape_blocking, telemetry, 120))[1].decode()
        finally:
            await stop(process, limit=60)
    assert chart_limit.oom_kills() == 0
    text = body.decode()
    assert b"last_applied" not in body
    values = [line for line in text.splitlines() if line.startswith("kube_resourceclaim_")]
    longest = max(len(value) for value in values)
    assert longest < 2 * MAX_VALUE_LENGTH, longest
    if make is noted:  # each collection made so far counts each claim's value
        counted = float(own.split(CUT_COUNT, 1)[1].split("\n", 1)[0])
        assert counted > 0 and counted % claims == 0, counted
    else:
        assert 'label_team="team-1"' in text


def _answered(port: int) -> tuple[int, bytes] | None:
    try:
        return scrape_blocking(port, 120)
    except OSError:
        return None
