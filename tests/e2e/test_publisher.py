"""Slices published by the real controller: the exporter against the API and the scheduler.

A simulated cluster of its own (tests/e2e/simulated.py). publish-slices (tests/e2e/publisher.py)
publishes through the resourceslice controller DRA drivers use: slice names, pool generations,
``resourceSliceCount`` and the order of the writes are the controller's, not the test's.

- Driver shapes (tests/e2e/driver_shapes.py): the example driver's ``gpu`` with and without
  partitions, ``cpu`` and ``net`` (shared by capacity), NVIDIA's dynamic MIG. The exporter's
  pool families must be what the API holds, and claims the real scheduler allocates from each
  pool must show allocated, the full GPU behind a partition in use blocked, the capacity left of
  a shared device its capacity less what the allocations consumed.
- A rollout, every write of the controller held until the test has looked: the first publish,
  a republish adding a slice and removing a device, one removing the slice again. Between two
  writes the API does not change, so the exporter (watch mode) must come to report exactly what
  the API holds, ``kube_resourcepool_state``, generation and slice counts; while it says
  ``incomplete`` a new pod asking for a device of the pool is found unschedulable by the
  scheduler, and once it says ``usable`` every such pod is bound.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import driver_shapes
from tests.e2e.harness import Exporter, wait_until, write_kubeconfig
from tests.e2e.publisher import Publisher
from tests.e2e.simulated import Simulated, start_simulated
from tests.e2e.simworld import claim, pod, samples, values

pytestmark = pytest.mark.slow
RESOURCE = "/apis/resource.k8s.io/v1"
NAMESPACE = "publisher"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
ROLLOUT = "rollout.example.com"
NODES = ("pub-a", "pub-b", "pub-c", "pub-r")
AGREE = 60.0
"""Seconds for the exporter, or the scheduler, to act on a state the API holds: they take ms."""
CLASSES = {
    "gpu.example.com": 'device.driver == "gpu.example.com"',
    "cpu.example.com": 'device.driver == "cpu.example.com"',
    "net.example.com": 'device.driver == "net.example.com"',
    "mig.nvidia.com": 'device.driver == "gpu.nvidia.com"'
    ' && device.attributes["gpu.nvidia.com"].type == "mig"',
    ROLLOUT: f'device.driver == "{ROLLOUT}"',
}
SHAPES = {
    "gpu.example.com": {
        "pub-a": driver_shapes.example_gpu("pub-a"),
        "pub-b": driver_shapes.example_gpu_partitions("pub-b"),
    },
    "cpu.example.com": {"pub-a": driver_shapes.example_cpu("pub-a")},
    "net.example.com": {"pub-b": driver_shapes.example_net("pub-b")},
    "gpu.nvidia.com": {"pub-c": driver_shapes.nvidia_dynamic_mig("pub-c")},
}
SHAPED = {
    # (driver, pool): (slices, devices) the shapes publish
    ("gpu.example.com", "pub-a"): (1, 8),
    ("gpu.example.com", "pub-b"): (2, 24),
    ("cpu.example.com", "pub-a"): (1, 8),
    ("net.example.com", "pub-b"): (1, 8),
    ("gpu.nvidia.com", "pub-c"): (3, 30),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("simulated"))
    try:
        for node in NODES:
            simulated.add_node(node)
        simulated.add_namespace(NAMESPACE)
        for name, expression in CLASSES.items():
            simulated.kube.create(
                f"{RESOURCE}/deviceclasses",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": expression}}]},
                },
            )
        yield simulated
    finally:
        simulated.stop()


@pytest.fixture(scope="module")
def shapes(cluster: Simulated, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Each driver's pools, published by its own publish-slices, as each driver runs its own."""
    directory = tmp_path_factory.mktemp("publishers")
    publishers = [
        Publisher(directory / driver, cluster.kube, {"driver": driver, "nodes": nodes})
        for driver, nodes in SHAPES.items()
    ]
    try:
        for publisher in publishers:
            publisher.wait_synced()
        yield
    finally:
        for publisher in publishers:
            assert publisher.stop() == 0, publisher.log()


def exporter(simulated: Simulated, directory: Path, mode: str) -> Exporter:
    config = write_kubeconfig(directory / "kubeconfig", simulated.kube, simulated.kube.token)
    return Exporter(
        directory / "run",
        ["--resources", "resourceclaims,resourceslices,deviceclasses", "--mode", mode],
        {"KUBECONFIG": str(config)},
    )


Pools = dict[tuple[str, str], dict[str, Any]]


def held_pools(simulated: Simulated, drivers: set[str]) -> Pools:
    """Each pool of *drivers* as the API holds it, by the allocator's rules of completeness."""
    slices = [
        made
        for made in simulated.kube.get(f"{RESOURCE}/resourceslices")["items"]
        if made["spec"]["driver"] in drivers
    ]
    pools: Pools = {}
    for made in slices:
        spec = made["spec"]
        key = (spec["driver"], spec["pool"]["name"])
        pools.setdefault(key, {"slices": set(), "generation": 0})
        pools[key]["slices"].add((made["metadata"]["name"], spec["pool"]["generation"]))
        pools[key]["generation"] = max(pools[key]["generation"], spec["pool"]["generation"])
    for (driver, name), pool in pools.items():
        current = [
            made["spec"]
            for made in slices
            if (made["spec"]["driver"], made["spec"]["pool"]["name"]) == (driver, name)
            and made["spec"]["pool"]["generation"] == pool["generation"]
        ]
        pool["expected"] = current[0]["pool"]["resourceSliceCount"]
        pool["published"] = len(current)
        pool["stale"] = len(pool["slices"]) - len(current)
        pool["state"] = "usable" if pool["published"] == pool["expected"] else "incomplete"
        pool["devices"] = sorted(
            device["name"] for spec in current for device in spec.get("devices", [])
        )
    return pools


def reported_pools(body: str, drivers: set[str]) -> Pools:
    """The same, as the exporter reports it."""
    pools: Pools = {}

    def pool(labels: dict[str, str]) -> dict[str, Any] | None:
        if labels["driver"] not in drivers:
            return None
        return pools.setdefault((labels["driver"], labels["pool"]), {"slices": set()})

    for labels, value in values(body, "kube_resourcepool_generation"):
        if (found := pool(labels)) is not None:
            found["generation"] = int(value)
    for labels, value in values(body, "kube_resourcepool_slices"):
        if (found := pool(labels)) is not None:
            found[labels["state"]] = int(value)
    for labels in samples(body, "kube_resourcepool_state"):
        if (found := pool(labels)) is not None:
            found["state"] = labels["state"]
    for labels in samples(body, "kube_resourceslice_info"):
        if (found := pool(labels)) is not None:
            found["slices"].add((labels["resourceslice_name"], int(labels["generation"])))
    for labels in samples(body, "kube_resourceslice_device_info"):
        if (found := pool(labels)) is not None:
            found.setdefault("devices", []).append(labels["device_name"])
    for found in pools.values():
        found["devices"] = sorted(found.get("devices", []))
    return pools


def agreed(simulated: Simulated, running: Exporter, drivers: set[str]) -> tuple[Pools, str]:
    """The pools once the exporter reports what the API holds, and the scrape that did."""

    def same() -> tuple[Pools, str] | None:
        held = held_pools(simulated, drivers)
        code, body = running.scrape()
        return (held, body) if code == 200 and reported_pools(body, drivers) == held else None

    try:
        answer: tuple[Pools, str] = wait_until(same, AGREE, "the exporter reporting the API")
    except AssertionError:
        code, body = running.scrape()
        assert reported_pools(body, drivers) == held_pools(simulated, drivers), code
        raise
    return answer


def test_pools_are_what_the_api_holds(cluster: Simulated, shapes: None, tmp_path: Path) -> None:
    """Every pool the drivers' shapes make: slices, generation, devices, complete and usable."""
    running = exporter(cluster, tmp_path, "list")
    try:
        held, _ = agreed(cluster, running, {driver for driver in SHAPES})
    finally:
        running.stop()
    assert {key: (pool["published"], len(pool["devices"])) for key, pool in held.items()} == SHAPED
    for (driver, node), pool in held.items():
        assert pool["state"] == "usable" and pool["generation"] == 1 and pool["stale"] == 0
        for name, _ in pool["slices"]:  # <index>-<driver>-<node>-<random>, the controller's
            assert re.fullmatch(rf"[0-9a-f]+-{re.escape(driver)}-{node}-[a-z0-9]{{5}}", name)


def run_pod(simulated: Simulated, name: str, made: dict[str, Any], node: str) -> None:
    simulated.kube.create(CLAIMS, made)
    simulated.kube.create(PODS, pod(name, {"resourceClaimName": made["metadata"]["name"]}, node))


def bound(simulated: Simulated, name: str) -> str | None:
    node: str | None = simulated.kube.get(f"{PODS}/{name}")["spec"].get("nodeName")
    return node


def unschedulable(simulated: Simulated, name: str) -> bool:
    """The scheduler has tried the pod and found no node for it."""
    got = simulated.kube.get(f"{PODS}/{name}")
    return not got["spec"].get("nodeName") and any(
        condition["type"] == "PodScheduled"
        and condition["status"] == "False"
        and condition["reason"] == "Unschedulable"
        for condition in got.get("status", {}).get("conditions", [])
    )


QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi|k|M|G)?")
UNITS = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 10**3, "M": 10**6, "G": 10**9}


def quantity(text: str) -> int:
    """The quantities these shapes use: an integer and a suffix."""
    found = QUANTITY.fullmatch(text)
    assert found, text
    return int(found[1]) * UNITS[found[2]]


INK = 'device.attributes["gpu.example.com"]'
ASKED = {
    # pod: (claim, node)
    "whole": (claim("whole", "gpu.example.com"), "pub-a"),
    "partition": (
        claim("partition", "gpu.example.com", f'"partition" in {INK} && {INK}.partition == 1'),
        "pub-b",
    ),
    "cores": (
        claim("cores", "cpu.example.com", capacity={"requests": {"cpu.example.com/cpu": "2"}}),
        "pub-a",
    ),
    "stream": (
        claim("stream", "net.example.com", capacity={"requests": {"bandwidth": "10G"}}),
        "pub-b",
    ),
    "mig": (
        claim("mig", "mig.nvidia.com", 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'),
        "pub-c",
    ),
}


def test_allocations_from_published_pools(cluster: Simulated, shapes: None, tmp_path: Path) -> None:
    """What the scheduler allocates from each shape is what the exporter shows in use."""
    for name, (made, node) in ASKED.items():
        run_pod(cluster, name, made, node)
    for name in ASKED:
        wait_until(partial(bound, cluster, name), AGREE, f"{name} scheduled")
    results = {
        (result["driver"], result["pool"], result["device"]): result
        for made in cluster.kube.get(CLAIMS)["items"]
        for result in made["status"]["allocation"]["devices"]["results"]
    }
    assert len(results) == len(ASKED)
    devices = {
        (made["spec"]["driver"], made["spec"]["pool"]["name"], device["name"]): device
        for made in cluster.kube.get(f"{RESOURCE}/resourceslices")["items"]
        for device in made["spec"].get("devices", [])
    }
    left: dict[tuple[str, ...], float] = {}
    for key, result in results.items():
        if devices[key].get("allowMultipleAllocations"):
            for capacity, published in devices[key]["capacity"].items():
                used = result.get("consumedCapacity", {}).get(capacity, "0")
                left[(*key, capacity)] = quantity(published["value"]) - quantity(used)
    assert len(left) == 3  # cpu; bandwidth and vfs (its requestPolicy's default)
    running = exporter(cluster, tmp_path, "watch")

    def shown() -> tuple[dict[tuple[str, str, str], str], dict[tuple[str, ...], float]] | None:
        code, body = running.scrape()
        if code != 200:  # not synchronised yet: the body says what it waits for
            return None
        states = {
            (row["driver"], row["pool"], row["device_name"]): row["state"]
            for row in samples(body, "kube_resourceslice_device_state")
        }
        available: dict[tuple[str, ...], float] = {
            (row["driver"], row["pool"], row["device_name"], row["capacity"]): value
            for row, value in values(body, "kube_resourceslice_device_capacity_available")
            if row["device_name"] in {device for _, _, device in results}
        }
        in_use = {key for key, state in states.items() if state == "allocated"}
        return (states, available) if in_use == set(results) else None

    try:
        states, available = wait_until(shown, AGREE, "the allocations in the exporter")
    finally:
        running.stop()
    assert available == left
    for driver, pool, device in results:  # the whole GPU behind a partition in use
        if device.endswith("-partition-1"):
            full = device.replace("-partition-1", "-full")
            assert states[(driver, pool, full)] == "blocked", full
            assert states[(driver, pool, "gpu-1-full")] == "available"
        if "-mig-" in device:
            assert states[(driver, pool, device.split("-mig-")[0])] == "blocked", device
            assert states[(driver, pool, "gpu-1")] == "available"


def rollout_pool(*slices: range) -> dict[str, Any]:
    """The rollout driver's pool on pub-r: slices of example GPUs by index."""
    devices = driver_shapes.example_gpu("pub-r", 16)["pools"]["pub-r"]["slices"][0]["devices"]
    pool = {"slices": [{"devices": [devices[index] for index in part]} for part in slices]}
    return {"driver": ROLLOUT, "nodes": {"pub-r": {"pools": {"pub-r": pool}}}}


FIRST = rollout_pool(range(0, 5), range(5, 9))
GROWN = rollout_pool(range(0, 5), range(5, 8), range(9, 13))
"""A slice added, and gpu-8 gone from the second."""
SHRUNK = rollout_pool(range(0, 5), range(5, 8))
"""The added slice removed again: the controller deletes first."""
STEPS = [
    # before each write the controller makes, then once synced:
    # (write, generation, published, expected, stale, state); None: no slice yet
    [("POST", None), ("POST", (1, 1, 2, 0, "incomplete")), ("synced", (1, 2, 2, 0, "usable"))],
    [
        ("PUT", (1, 2, 2, 0, "usable")),
        ("PUT", (2, 1, 3, 1, "incomplete")),
        ("POST", (2, 2, 3, 0, "incomplete")),
        ("synced", (2, 3, 3, 0, "usable")),
    ],
    [
        ("DELETE", (2, 3, 3, 0, "usable")),
        ("PUT", (2, 2, 3, 0, "incomplete")),
        ("PUT", (3, 1, 2, 1, "incomplete")),
        ("synced", (3, 2, 2, 0, "usable")),
    ],
]


class Rollout:
    """Follows publish-slices write by write, checking the exporter and the scheduler."""

    def __init__(self, simulated: Simulated, running: Exporter, publisher: Publisher) -> None:
        self.simulated = simulated
        self.running = running
        self.publisher = publisher
        self.pods = 0
        self.waiting: list[str] = []
        """Pods made while the pool was incomplete, not yet seen bound."""

    def follow(self) -> list[tuple[str, tuple[Any, ...] | None]]:
        """Each write held and the pool then, until the sync is done."""
        seen = []
        while True:
            write = self.publisher.next_write()
            pools, body = agreed(self.simulated, self.running, {ROLLOUT})
            pool = pools.get((ROLLOUT, "pub-r"))
            self.judge(pool, body)
            summary = None
            if pool is not None:
                fields = ("generation", "published", "expected", "stale", "state")
                summary = tuple(pool[field] for field in fields)
            seen.append(("synced" if write is None else write[0], summary))
            if write is None:
                return seen
            self.publisher.release()

    def judge(self, pool: dict[str, Any] | None, body: str) -> None:
        """The scheduler refuses the pool while it is incomplete, and uses it once usable.

        While incomplete, a new pod asking for one of its devices is refused, those made at
        earlier incomplete steps are still not bound and the exporter shows each device not
        allocated ``unusable``; once usable, all of those pods are bound.
        """
        if pool is None:
            return
        if pool["state"] == "incomplete":
            name = f"pod-{self.pods}"
            self.pods += 1
            run_pod(self.simulated, name, claim(name, ROLLOUT), "pub-r")
            wait_until(partial(unschedulable, self.simulated, name), AGREE, f"{name} refused")
            assert not any(bound(self.simulated, waiting) for waiting in self.waiting)
            self.waiting.append(name)
            states = {
                row["state"]
                for row in samples(body, "kube_resourceslice_device_state")
                if row["driver"] == ROLLOUT
            }
            assert "unusable" in states <= {"allocated", "unusable"}  # allocated comes first
        else:
            for waiting in self.waiting:
                wait_until(partial(bound, self.simulated, waiting), AGREE, f"{waiting} bound")
            self.waiting.clear()


def test_rollout_step_by_step(cluster: Simulated, tmp_path: Path) -> None:
    """At each write of a rollout, the exporter's pool is the API's and the scheduler's."""
    running = exporter(cluster, tmp_path, "watch")
    publisher = Publisher(tmp_path / "publisher", cluster.kube, FIRST, hold=True)
    rollout = Rollout(cluster, running, publisher)
    try:
        seen = [rollout.follow()]
        for description in (GROWN, SHRUNK):
            publisher.republish(description)
            seen.append(rollout.follow())
    finally:
        stopped = publisher.stop()
        running.stop()
    assert stopped == 0, publisher.log()
    assert seen == STEPS
    assert rollout.pods == 5 and not rollout.waiting
    held = held_pools(cluster, {ROLLOUT})[(ROLLOUT, "pub-r")]
    assert held["devices"] == [f"gpu-{index}" for index in range(8)]
