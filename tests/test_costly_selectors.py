"""Costly selectors never hold the reactor: CEL matched and compiled off it, node selectors by set.

Each test runs the exporter with a call due every 10 ms on its reactor (:mod:`tests.turnwatch`)
and asks how late that call ran at worst while the exporter read such classes: the longest turn
the reactor took, which ``/healthz`` and every scrape wait behind.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted

from kdraexp.cel import matching
from tests.objects import classy, gpu, pool_slice
from tests.processes import TURN_BOUND, longest_turn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not matching.AVAILABLE, reason="no CEL runtime on this platform"),
]

V1 = {"apiVersion": "resource.k8s.io/v1"}
SLOW = "'a'" + ".replace('a', 'aaaaaaaaaa')" * 6 + ".size() > 0"
"""Builds a string of a million characters: about 40 ms a device, inside the CPU budget."""
MAX_LENGTH = 10 * 1024
"""The longest selector expression the API accepts (CELSelectorExpressionMaxLength)."""
MAX_SELECTORS = 32
"""The most selectors a DeviceClass may hold (DeviceSelectorsMaxSize)."""


def long_selector(number: int) -> str:
    """An expression of :data:`MAX_LENGTH` characters that reads an attribute many times."""
    clause = "device.attributes['gpu.nvidia.com'].uuid != 'GPU-x{}'"
    clauses = [f"device.driver == 'gpu.nvidia.com' || '{number}' == ''"]
    while len(" && ".join(clauses)) + len(clause) + 12 < MAX_LENGTH:
        clauses.append(clause.format(len(clauses)))
    return " && ".join(clauses)


def cluster(tmp_path: Path, classes: list[dict[str, Any]], devices: int) -> Path:
    """A file of one slice of *devices* GPUs and *classes*."""
    path = tmp_path / "cluster.json"
    items = [
        {**V1, "kind": "ResourceSlice", **pool_slice("s", [gpu(f"g{i}") for i in range(devices)])},
        *({**V1, "kind": "DeviceClass", **one} for one in classes),
    ]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest_twisted.ensureDeferred
async def test_selectors_of_40_ms_a_device_are_matched_off_the_reactor(tmp_path: Path) -> None:
    """Four classes over 32 devices that each read differently: 128 evaluations of 40 ms.

    On the reactor, one turn took them all (1.7 s); off it, each turn is short.  Held to the
    tests' bound on a turn (:data:`~tests.processes.TURN_BOUND`), as every exporter a test
    starts is, not to the 100 ms a loaded machine cannot promise.
    """
    reads = "device.attributes['gpu.nvidia.com'].uuid.startsWith('GPU-') && {} >= 0 && "
    classes = [classy(f"slow{n}", reads.format(n) + SLOW) for n in range(4)]
    turn, body = await longest_turn(tmp_path, cluster(tmp_path, classes, 32))
    assert turn < TURN_BOUND, (tmp_path / "output.log").read_text()
    for n in range(4):  # every device matches: the answers are the selectors'
        assert body.count(f'node_name="pool",deviceclass_name="slow{n}"}} 1\n'.encode()) == 32


@pytest_twisted.ensureDeferred
async def test_the_longest_selectors_a_class_may_hold_are_compiled_off_the_reactor(
    tmp_path: Path,
) -> None:
    """Two classes of 32 selectors of 10 Ki characters each: 640 KiB of CEL to read."""
    classes = []
    for name in ("long0", "long1"):
        made = classy(name)
        made["spec"]["selectors"] = [
            {"cel": {"expression": long_selector(n)}} for n in range(MAX_SELECTORS)
        ]
        assert all(len(s["cel"]["expression"]) <= MAX_LENGTH for s in made["spec"]["selectors"])
        classes.append(made)
    turn, body = await longest_turn(tmp_path, cluster(tmp_path, classes, 4))
    assert turn < TURN_BOUND, (tmp_path / "output.log").read_text()
    for name in ("long0", "long1"):
        assert body.count(f'node_name="pool",deviceclass_name="{name}"}} 1\n'.encode()) == 4


@pytest_twisted.ensureDeferred
async def test_multi_host_pools_over_50000_nodes_are_placed_by_set(tmp_path: Path) -> None:
    """64 pools placed by a clique's node selector, 50,000 Nodes, 781 or 782 to a clique.

    Matched node by node, placing the pools and finding the Nodes an expected driver does not
    serve took 3.2 million matches a collection (4-5 s in one turn); by set, what the selectors
    name.
    """
    nodes = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": f"n{i}",
                "uid": f"u{i}",
                "labels": {"gpu": "true", "clique": f"c{i % 64}", "zone": f"z{i % 3}"},
            },
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(50_000)
    ]
    pools = []
    for j in range(64):
        clique = {"key": "clique", "operator": "In", "values": [f"c{j}"]}
        made = pool_slice(
            f"mh{j}",
            [gpu(f"g{k}") for k in range(4)],
            pool=f"mh{j}",
            nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [clique]}]},
        )
        del made["spec"]["nodeName"]
        pools.append({**V1, "kind": "ResourceSlice", **made})
    nvidia = {**V1, "kind": "DeviceClass", **classy("gpu", "device.driver == 'gpu.nvidia.com'")}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"kind": "List", "items": [*nodes, *pools, nvidia]}))
    turn, body = await longest_turn(
        tmp_path,
        path,
        "--resources=resourceclaims,resourceslices,deviceclasses,nodes",
        "--expect-pools=gpu.nvidia.com=gpu=true",
        "--max-response-bytes=256Mi",
    )
    assert turn < TURN_BOUND, (tmp_path / "output.log").read_text()
    placed = body.count(b'kube_resourcepool_allocatable_devices{driver="gpu.nvidia.com",pool="mh0"')
    assert placed == 782  # c0's nodes: n0, n64, ... n49984
    assert b"kube_node_dra_pool_missing{" not in body
