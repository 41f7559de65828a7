"""Objects each within the bound of one object, and yet many times their size once read.

The exporter runs as a process in the chart's 192 MiB memory limit, which the kernel enforces,
and lists them from the fake API over HTTPS.  Each list holds the lists an object may hold
past what the API server allows, in a page within --max-response-bytes: the scrape answers,
the lists cut or refused are counted, and nothing is killed.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from tests.kubeconfigs import write_kubeconfig
from tests.objects import new_claim
from tests.processes import (
    CHART_LIMIT,
    MemoryCgroup,
    free_port,
    get,
    listeners,
    memory,
    memory_cgroup,
    start,
    stop,
    wait_for,
)
from tests.tlsapi import serve

pytestmark = pytest.mark.slow
WITH_PODS = "resourceclaims,resourceslices,deviceclasses,pods"


def _pods() -> list[dict[str, Any]]:
    """18 pods of 3.4 MB, each listing 10,000 devices of 300-byte IDs (a page of 62 MB)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{n}", "namespace": "ns", "uid": f"pu{n}"},
            "spec": {"nodeName": "node", "containers": [{"name": "c"}]},
            "status": {
                "containerStatuses": [
                    {
                        "name": "c",
                        "allocatedResourcesStatus": [
                            {
                                "name": "claim:gpus/gpu",
                                "resources": [
                                    {"resourceID": f"{n:02d}-{d:06d}".ljust(300, "x")}
                                    for d in range(10_000)
                                ],
                            }
                        ],
                    }
                ]
            },
        }
        for n in range(18)
    ]


def _slices() -> list[dict[str, Any]]:
    """12 slices whose one device's capacity lists 350,000 validValues (3.5 MB each)."""
    policy = {"default": "1Mi", "validValues": [f"{v}Mi" for v in range(1, 350_001)]}
    return [
        {
            "metadata": {"name": f"s{n}", "uid": f"su{n}"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": f"n{n}",
                "pool": {"name": f"p{n}", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "d", "capacity": {"memory": {"value": "1Ti", "requestPolicy": policy}}}
                ],
            },
        }
        for n in range(12)
    ]


def _claims() -> list[dict[str, Any]]:
    """12 claims whose one result carries 200,000 bindingConditions (2.6 MB each)."""
    conditions = [f"c{n:06d}" for n in range(200_000)]
    return [
        new_claim(
            f"c{n}",
            [
                {
                    "request": "gpu",
                    "driver": "gpu.example.com",
                    "pool": "p",
                    "device": "d",
                    "bindingConditions": conditions,
                }
            ],
            reserved=True,
        )
        for n in range(12)
    ]


@pytest.fixture
def chart_limit() -> Iterator[MemoryCgroup]:
    yield from memory_cgroup("what-objects-become", CHART_LIMIT)


@pytest.mark.parametrize(
    ("plural", "made", "field"),
    [
        ("pods", _pods, "status.containerStatuses[].allocatedResourcesStatus"),
        ("resourceslices", _slices, "capacity"),
        ("resourceclaims", _claims, "bindingConditions"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_lists_an_object_holds_are_bounded_in_the_chart_limit(
    tmp_path: Path, chart_limit: MemoryCgroup, plural: str, made: Any, field: str
) -> None:
    """Lists past the API server's bounds are cut or refused, counted, and nothing is killed.

    Measured in this test: pods listing 10,000 devices peaked at 194 MiB, slices with 350,000
    validValues at 161 MiB, and claims with 200,000 binding conditions were killed by the
    kernel; now 130, 144 and 103 MiB.
    """
    with serve() as api:
        api.fake.objects[plural] = made()  # pods too: the fake serves them once given
        config = write_kubeconfig(tmp_path / "kubeconfig", api.server, api.ca_pem, {"token": "t"})
        port, telemetry = free_port(), free_port()
        process = start(
            [
                *listeners(port, telemetry),
                "--timeout",
                "120",
                "--resources",
                WITH_PODS if plural == "pods" else "resourceclaims,resourceslices,deviceclasses",
            ],
            tmp_path,
            {"KUBECONFIG": str(config)},
            cgroup=chart_limit,
        )
        try:
            await wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz"), 60)
            answer = await get(f"http://127.0.0.1:{port}/metrics", timeout=180)
            assert process.poll() is None, (tmp_path / "output.log").read_text()
            assert answer is not None and answer[0] == 200, answer
            used = memory(process.pid)["VmHWM"]
            print(f"{plural}: peak RSS {used / 2**20:.0f} MiB")
            counted = await get(f"http://127.0.0.1:{telemetry}/metrics")
            assert counted is not None
            line = f'kube_dra_exporter_invalid_values_total{{field="{field}",resource="{plural}"}}'
            assert line.encode() in counted[1], counted[1]
            assert chart_limit.oom_kills() == 0
            assert used < 160 * 2**20
        finally:
            await stop(process, 30)


def test_a_file_of_many_small_objects_is_refused_in_the_chart_limit(
    tmp_path: Path, chart_limit: MemoryCgroup
) -> None:
    """A 50 MB --source file of 110,000 one-device slices: refused as too many objects.

    Each within every bound of bytes, they become 3.9 KB each once read: the exporter was
    killed by the kernel on its way to 282 MiB.  Counted at 4 KiB each against the response's
    bound, they are refused before they are all read.
    """
    device = {
        "name": "gpu-0",
        "attributes": {
            "uuid": {"string": "GPU-000000000000-aaaa-bbbb-cccc"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
    items = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"s{n}", "uid": f"u{n}", "resourceVersion": "1"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": f"n{n}",
                "pool": {"name": f"p{n}", "generation": 1, "resourceSliceCount": 1},
                "devices": [device],
            },
        }
        for n in range(110_000)
    ]
    dump = tmp_path / "cluster.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    del items
    assert dump.stat().st_size > 48 * 2**20
    port = free_port()
    process = start(
        [
            *("--listen", f"tcp:{port}:interface=127.0.0.1"),
            *("--timeout", "120", "--source", f"file:{dump}"),
        ],
        tmp_path,
        cgroup=chart_limit,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=170):
                    raise AssertionError("the file was read whole")
            except urllib.error.HTTPError as error:
                code, body = error.code, error.read()
                break
            except OSError:
                assert process.poll() is None, (tmp_path / "output.log").read_text()
                assert time.monotonic() < deadline
                time.sleep(0.2)
        used = memory(process.pid)["VmHWM"]
        print(f"file: peak RSS {used / 2**20:.0f} MiB")
        assert code == 500
        assert b"TooLarge: a page of resourceslices holds more than 16384 objects" in body, body
        assert chart_limit.oom_kills() == 0
        assert used < 176 * 2**20
    finally:
        process.terminate()
        process.wait(timeout=30)
