"""The Node view against kube-scheduler: multi-host pools serve the nodes their selectors match.

A simulated cluster of six Nodes: one GPU pool on each of two of them, a pool of channels
published with a node selector (the nodes of clique a), a pool whose devices select their nodes
one by one (``perDeviceNodeSelection``), and a GPU node no pool serves.  The exporter, with
``--resources ...,nodes`` and ``--expect-pools``, places the channels on clique a's node only:
the scheduler binds a pod pinned there and leaves one pinned elsewhere pending, which the
exporter says is ``unreachable``.

Three GB200 Nodes form clique gb, served by one pool under ``perDeviceNodeSelection``: a GPU
bound to each of gb-0 and gb-1, and one device for the whole clique by its own node selector.
gb-2 has no GPU of its own.  The exporter counts the clique's device on each of the three,
beside the node's own GPU, as the scheduler places pods there.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Exporter, wait_until, write_kubeconfig
from tests.e2e.simulated import Simulated, start_simulated
from tests.e2e.simworld import (
    CLAIMS,
    DRIVER,
    NAMESPACE,
    PODS,
    RESOURCE,
    RESOURCES,
    SCHEDULED,
    bound,
    claim,
    device_class,
    gpu,
    ok,
    placed_one_after_another,
    pod,
    remove,
    unschedulable,
    values,
)
from tests.objects import resource_slice

CLIQUE_A = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "clique", "operator": "In", "values": ["a"]}]}
    ]
}
CLIQUE_GB = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "clique", "operator": "In", "values": ["gb"]}]}
    ]
}


def slices() -> list[dict[str, Any]]:
    channels = resource_slice(
        "nv-channels",
        [gpu("nv-channels", f"ch-{i}", kind="channel") for i in range(2)],
        driver=DRIVER,
        pool="nv-channels",
        nodeSelector=CLIQUE_A,
    )
    per_device = resource_slice(
        "nv-per-device",
        [
            {**gpu("nv-per-device", "d-a", kind="channel"), "nodeSelector": CLIQUE_A},
            {**gpu("nv-per-device", "d-b", kind="channel"), "nodeName": "nv-b"},
        ],
        driver=DRIVER,
        pool="nv-per-device",
        perDeviceNodeSelection=True,
    )
    gb200 = resource_slice(
        "nv-gb",
        [
            {**gpu("nv-gb", "gpu-0", kind="gb200"), "nodeName": "gb-0"},
            {**gpu("nv-gb", "gpu-1", kind="gb200"), "nodeName": "gb-1"},
            {**gpu("nv-gb", "imex", kind="gb200"), "nodeSelector": CLIQUE_GB},
        ],
        driver=DRIVER,
        pool="nv-gb",
        perDeviceNodeSelection=True,
    )
    local = [
        resource_slice(
            f"nv-{node}",
            [gpu(f"nv-{node}", "gpu-0")],
            driver=DRIVER,
            pool=f"nv-{node}",
            nodeName=f"nv-{node}",
        )
        for node in ("a", "b")
    ]
    return [channels, per_device, gb200, *local]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("node-view"))
    kube = simulated.kube
    try:
        for node, labels in (
            ("nv-a", {"clique": "a", "gpu": "true"}),
            ("nv-b", {"clique": "b", "gpu": "true"}),
            ("nv-c", {"gpu": "true"}),
            ("gb-0", {"clique": "gb", "gpu": "true"}),
            ("gb-1", {"clique": "gb", "gpu": "true"}),
            ("gb-2", {"clique": "gb", "gpu": "true"}),
        ):
            simulated.add_node(node)
            made = kube.get(f"/api/v1/nodes/{node}")
            made["metadata"]["labels"].update(labels)
            kube.put(f"/api/v1/nodes/{node}", made)
        simulated.add_namespace(NAMESPACE)
        for kind in ("gpu", "channel", "gb200"):
            kube.create(f"{RESOURCE}/deviceclasses", device_class(f"nv-{kind}", kind))
        for made in slices():
            kube.create(f"{RESOURCE}/resourceslices", made)
        yield simulated
    finally:
        simulated.stop()


def scrape(cluster: Simulated, directory: Path, mode: str = "list") -> str:
    directory.mkdir()
    config = write_kubeconfig(directory / "kubeconfig", cluster.kube, cluster.kube.token)
    running = Exporter(
        directory / "run",
        [
            "--resources",
            f"{RESOURCES},pods,nodes",
            "--mode",
            mode,
            "--expect-pools",
            f"{DRIVER}=gpu=true",
        ],
        {"KUBECONFIG": str(config)},
    )
    try:
        _, body = wait_until(lambda: ok(running.scrape()), 60, "a scrape")
    finally:
        running.stop()
    return body


def fits(body: str, deviceclass: str) -> dict[tuple[str, str], float]:
    return {
        (row["pool"], row["node_name"]): value
        for row, value in values(body, "kube_resourcepool_allocatable_devices")
        if row["deviceclass_name"] == deviceclass
    }


def test_multi_host_pools_serve_the_nodes_their_selectors_match(
    cluster: Simulated, tmp_path: Path
) -> None:
    """Channels fit on clique a's node only; the scheduler agrees, pod by pod."""
    body = scrape(cluster, tmp_path / "list")
    assert fits(body, "nv-channel") == {
        ("nv-channels", "nv-a"): 2.0,
        ("nv-per-device", "nv-a"): 1.0,
        ("nv-per-device", "nv-b"): 1.0,
    }
    selectors = {
        (row["resourceslice_name"], row["device_name"]): row["selector"]
        for row in [labels for labels, _ in values(body, "kube_resourceslice_node_selector_info")]
    }
    assert selectors == {
        ("nv-channels", ""): "clique in (a)",
        ("nv-per-device", "d-a"): "clique in (a)",
        ("nv-gb", "imex"): "clique in (gb)",
    }
    assert {
        (row["node_name"], row["driver"])
        for row, value in values(body, "kube_node_dra_pool_missing")
        if value == 1
    } == {("nv-c", DRIVER)}
    assert {
        (row["pool"], row["state"]) for row, _ in values(body, "kube_resourcepool_node_state")
    } == {("nv-a", "ready"), ("nv-b", "ready"), ("nv-per-device", "ready"), ("nv-gb", "ready")}
    watched = scrape(cluster, tmp_path / "watch", "watch")
    assert fits(watched, "nv-channel") == fits(body, "nv-channel")
    # Two channel pods pinned to nv-b: the scheduler places one (the per-device channel bound
    # there) and leaves the second pending; the channels of nv-channels never go there.
    for name, node in (("ch-b-1", "nv-b"), ("ch-b-2", "nv-b"), ("ch-a", "nv-a")):
        cluster.kube.create(CLAIMS, claim(name, "nv-channel"))
        cluster.kube.create(PODS, pod(name, {"resourceClaimName": name}, node))
    try:
        wait_until(partial(bound, cluster, "ch-a"), SCHEDULED, "the pod pinned to clique a")
        placed = wait_until(
            lambda: [n for n in ("ch-b-1", "ch-b-2") if bound(cluster, n)] or None,
            SCHEDULED,
            "one channel pod placed on nv-b",
        )
        waiting = ({"ch-b-1", "ch-b-2"} - set(placed)).pop()
        wait_until(partial(unschedulable, cluster, waiting), SCHEDULED, "the other pending")
        assert len(placed) == 1
        allocated = cluster.kube.get(f"{CLAIMS}/{placed[0]}")["status"]["allocation"]
        (result,) = allocated["devices"]["results"]
        assert (result["pool"], result["device"]) == ("nv-per-device", "d-b")
        # Channels are free (clique a's), but none on a node the waiting pod may run on.
        pending = scrape(cluster, tmp_path / "pending")
        assert {
            row["resourceclaim_name"]: row["reason"]
            for row, value in values(pending, "kube_resourceclaim_pending_reason")
            if value == 1
        } == {waiting: "unreachable"}
    finally:
        names = ("ch-b-1", "ch-b-2", "ch-a")
        cluster.delete_pods(NAMESPACE, *names)
        for name in names:
            cluster.kube.delete(f"{CLAIMS}/{name}")


def test_a_device_placed_by_its_own_selector_serves_beside_each_nodes_own(
    cluster: Simulated, tmp_path: Path
) -> None:
    """Each GB200 node fits its own GPU and the clique's device: the scheduler places as many.

    Of three pods pinned to gb-1, the scheduler places two (gpu-1 and the clique's device) and
    leaves the third pending, which the exporter says is ``unreachable``: gpu-0 is free, on
    gb-0 only.  gb-2, which only the clique's device serves, misses no pool.
    """
    body = scrape(cluster, tmp_path / "list")
    assert fits(body, "nv-gb200") == {
        ("nv-gb", "gb-0"): 2.0,
        ("nv-gb", "gb-1"): 2.0,
        ("nv-gb", "gb-2"): 1.0,
    }
    assert not [
        row for row, _ in values(body, "kube_node_dra_pool_missing") if "gb" in row["node_name"]
    ]
    for node in ("gb-0", "gb-2"):

        def start(name: str, node: str = node) -> None:
            cluster.kube.create(CLAIMS, claim(name, "nv-gb200"))
            cluster.kube.create(PODS, pod(name, {"resourceClaimName": name}, node))

        placed = placed_one_after_another(cluster, f"on-{node}", start)
        assert placed == fits(body, "nv-gb200")[("nv-gb", node)], node
    names = [f"on-gb-1-{n}" for n in range(3)]
    for name in names:
        cluster.kube.create(CLAIMS, claim(name, "nv-gb200"))
        cluster.kube.create(PODS, pod(name, {"resourceClaimName": name}, "gb-1"))
    try:
        wait_until(
            lambda: all(bound(cluster, n) or unschedulable(cluster, n) for n in names),
            SCHEDULED,
            "the scheduler's decision on the pods pinned to gb-1",
        )
        placed_on = [name for name in names if bound(cluster, name)]
        assert len(placed_on) == 2
        taken = {
            (result["pool"], result["device"])
            for name in placed_on
            for result in cluster.kube.get(f"{CLAIMS}/{name}")["status"]["allocation"]["devices"][
                "results"
            ]
        }
        assert taken == {("nv-gb", "gpu-1"), ("nv-gb", "imex")}
        (waiting,) = set(names) - set(placed_on)
        after = scrape(cluster, tmp_path / "placed")
        assert fits(after, "nv-gb200") == {
            ("nv-gb", "gb-0"): 1.0,
            ("nv-gb", "gb-1"): 0.0,
            ("nv-gb", "gb-2"): 0.0,
        }
        assert {
            row["resourceclaim_name"]: row["reason"]
            for row, value in values(after, "kube_resourceclaim_pending_reason")
            if value == 1 and row["resourceclaim_name"] in names
        } == {waiting: "unreachable"}
    finally:
        remove(cluster, names)
