"""A DeviceClass whose selector takes a gigabyte, in the chart's default memory limit.

Nine chained ``replace()`` calls build a string of a billion characters for each device.  Run in
the exporter's own process, that was an OOM kill inside 192 MiB; evaluated in the bounded
process, the class is over budget, matches nothing and counts as a CEL error, one line is
logged, and the exporter answers on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_twisted

from kdraexp.cel import matching
from tests.objects import classy, gpu, pool_slice
from tests.processes import (
    CHART_LIMIT,
    MemoryCgroup,
    free_port,
    get,
    listeners,
    memory_cgroup,
    ready,
    start,
    stop,
    wait_for,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL runtime on this platform"),
]

V1 = {"apiVersion": "resource.k8s.io/v1"}
BOMB = "'a'" + ".replace('a', 'aaaaaaaaaa')" * 9 + ".size() > 0"


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    yield from memory_cgroup("cel", CHART_LIMIT)


@pytest_twisted.ensureDeferred
async def test_a_gigabyte_selector_is_over_budget_and_the_exporter_lives(
    tmp_path: Path, cgroup: MemoryCgroup
) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        **V1,
                        "kind": "ResourceSlice",
                        **pool_slice("s", [gpu(f"g{i}") for i in range(8)]),
                    },
                    {**V1, "kind": "DeviceClass", **classy("bomb", BOMB)},
                    {
                        **V1,
                        "kind": "DeviceClass",
                        **classy("fine", "device.driver == 'gpu.nvidia.com'"),
                    },
                ],
            }
        )
    )
    port, telemetry = free_port(), free_port()
    process = start(
        [*listeners(port, telemetry), "--source", f"file:{cluster}"],
        tmp_path,
        {"KUBECONFIG": "/nonexistent"},
        cgroup=cgroup,
    )
    try:
        await wait_for(lambda: ready(port))
        for _ in range(2):
            code, body = await get(f"http://127.0.0.1:{port}/metrics")  # type: ignore[misc]
            assert code == 200
            assert body.count(b'node_name="pool",deviceclass_name="fine"} 1') == 8
            assert b'node_name="pool",deviceclass_name="bomb"}' not in body
        _, self_metrics = await get(f"http://127.0.0.1:{telemetry}/metrics")  # type: ignore[misc]
        # Its 8 devices, in the collection made at start and in each scrape's.
        assert b'kube_dra_exporter_cel_errors_total{deviceclass_name="bomb"} 24.0' in self_metrics
        assert cgroup.oom_kills() == 0
        assert process.poll() is None
    finally:
        assert await stop(process) == 0
    log = (tmp_path / "output.log").read_text()
    assert log.count("DeviceClass bomb: selector 0: over the evaluation budget") == 0
    # Which bound a string growing tenfold per call meets first depends on how soon the CPU
    # time is seen: on a loaded machine the memory bound can come first. Either is the budget.
    budget = re.findall(r"DeviceClass bomb: over the evaluation budget: ([^(]*)", log)
    assert len(budget) == 1, log
    assert budget[0].strip() in (
        "more than 0.1 s of CPU for one device",
        "more memory than the evaluation process may hold",
    ), budget
