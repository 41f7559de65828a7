"""Idle cost on a cluster the real scheduler allocates: each GPU priced once, its use as allocated.

A simulated cluster of its own (tests/e2e/simulated.py), one Node: two whole H200s, and an
H200 in dynamic MIG mode (its whole device and four 1g partitions on shared counters), its pool
published in three slices, one of them without devices, as drivers publish while a GPU
initialises; and a pool of an empty slice alone.  Three priced classes overlap: a generic one
(3.50) and a per-model one (5.00) select the whole GPUs, a MIG class (0.55) the partitions.
Pods ask for two partitions and one whole GPU; kube-scheduler allocates them.  The exporter's
idle cost per pool must be what the rule makes of the scheduler's allocations, and the
dashboard's panel, run by a real Prometheus scraping the exporter, their sum.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests import dashboard, tools
from tests.e2e import prometheus
from tests.e2e import simworld as world
from tests.e2e.harness import wait_until
from tests.e2e.simulated import Simulated, start_simulated

NODE = "idle-a"
MIG_POOL = "idle-a-mig"
EVERY = world.counters(memory="40Gi", **{f"memory_slice_{i}": "1" for i in range(4)})
"""The MIG GPU's counters: 40Gi of memory in four placement slices."""
PRICES = {"idle-gpu": ("gpu", "3.50"), "idle-h200": ("gpu", "5.00"), "idle-mig": ("mig", "0.55")}
"""Class -> (device type it selects, hourly cost); idle-h200 also asks for the H200 model."""


H200 = {"productName": {"string": "NVIDIA H200"}}


def h200(pool: str, name: str, kind: str, **extra: Any) -> dict[str, Any]:
    """An H200, or a partition of one."""
    return world.device(pool, name, kind, attributes=H200, **extra)


def partition(index: int) -> dict[str, Any]:
    needs = world.counters(memory="10Gi", **{f"memory_slice_{index}": "1"})
    return h200(
        MIG_POOL, f"1g-{index}", "mig", consumesCounters=[{"counterSet": "gpu", "counters": needs}]
    )


MIG_DEVICES = [
    h200(MIG_POOL, "whole", "gpu", consumesCounters=[{"counterSet": "gpu", "counters": EVERY}]),
    *(partition(index) for index in range(4)),
]
SLICES = [
    world.pool_slice(NODE, NODE, NODE, devices=[h200(NODE, f"gpu-{i}", "gpu") for i in range(2)]),
    world.pool_slice(
        f"{MIG_POOL}-counters",
        NODE,
        MIG_POOL,
        3,
        sharedCounters=[{"name": "gpu", "counters": EVERY}],
    ),
    world.pool_slice(
        f"{MIG_POOL}-devices",
        NODE,
        MIG_POOL,
        3,
        devices=MIG_DEVICES,
    ),
    world.pool_slice(f"{MIG_POOL}-initialising", NODE, MIG_POOL, 3, devices=[]),
    world.pool_slice("idle-a-empty", NODE, "idle-a-empty", devices=[]),
]


def priced_class(name: str) -> dict[str, Any]:
    kind, cost = PRICES[name]
    made = world.device_class(name, kind)
    made["metadata"]["annotations"] = {"hourly-cost": cost}
    if name == "idle-h200":
        expression = made["spec"]["selectors"][0]["cel"]["expression"]
        model = f'device.attributes["{world.DRIVER}"].productName == "NVIDIA H200"'
        made["spec"]["selectors"][0]["cel"]["expression"] = f"{expression} && {model}"
    return made


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("idle-cost"))
    kube = simulated.kube
    try:
        simulated.add_node(NODE)
        simulated.add_namespace(world.NAMESPACE)
        for name in PRICES:
            kube.create(f"{world.RESOURCE}/deviceclasses", priced_class(name))
        for made in SLICES:
            kube.create(f"{world.RESOURCE}/resourceslices", made)
        for name, deviceclass in (("one-partition", "idle-mig"), ("one-gpu", "idle-gpu")):
            kube.create(
                f"{world.RESOURCE}/namespaces/{world.NAMESPACE}/resourceclaimtemplates",
                world.claim_template(name, deviceclass),
            )
        for name, template in (("small-0", "one-partition"), ("small-1", "one-partition")):
            kube.create(world.PODS, world.pod(name, {"resourceClaimTemplateName": template}))
        kube.create(world.PODS, world.pod("large", {"resourceClaimTemplateName": "one-gpu"}))
        for name in ("small-0", "small-1", "large"):
            wait_until(partial(world.bound, simulated, name), world.SCHEDULED, f"{name} scheduled")
        yield simulated
    finally:
        simulated.stop()


def implied(simulated: Simulated) -> dict[str, float]:
    """Per pool, the idle cost the rule makes of the scheduler's allocations.

    A whole GPU is priced 5.00 (the dearest of the two classes selecting it); the MIG GPU's
    counter set at the largest of its devices' prices over their shares: the whole device's
    5.00 over all of it, a partition's 0.55 over a quarter (2.20).  Its use is the busiest of
    memory and the memory-slice placement group.
    """
    allocated = world.allocated(simulated)
    whole = max(float(PRICES[name][1]) for name in ("idle-gpu", "idle-h200"))
    plain = sum(whole for i in range(2) if (NODE, f"gpu-{i}") not in allocated)
    devices = {d["name"]: d for d in MIG_DEVICES}
    memory, placement = 0.0, 0.0
    for pool, name in allocated:
        if pool == MIG_POOL:
            (needs,) = devices[name]["consumesCounters"]
            used = needs["counters"]
            memory += 10.0 if "memory" in used else 0.0
            placement += sum(1 for counter in used if counter.startswith("memory-slice-"))
    use = max(memory / 40.0, placement / 4.0)
    mig_price = max(whole, float(PRICES["idle-mig"][1]) / 0.25)
    return {NODE: plain, MIG_POOL: max(0.0, 1.0 - use) * mig_price}


def test_idle_cost_is_what_the_rule_makes_of_the_schedulers_allocations(
    cluster: Simulated, tmp_path: Path
) -> None:
    """Per pool as the rule implies; the dashboard's figure their sum, on a real Prometheus."""
    results = {
        (result["pool"], result["device"])
        for claim in world.claims(cluster)
        for result in claim["status"]["allocation"]["devices"]["results"]
    }
    assert {pool for pool, _ in results} == {NODE, MIG_POOL}, results
    assert len(results) == 3, "two partitions and a whole GPU"
    running = world.exporter(cluster, tmp_path, "list")
    try:
        _, body = wait_until(lambda: world.ok(running.scrape()), 30, "a scrape")
        expected = implied(cluster)
        assert expected == {NODE: 5.0, MIG_POOL: 2.5}, "the scheduler's first fit, priced"
        idle = {
            (row["pool"], row["node_name"]): value
            for row, value in world.values(body, "kube_resourcepool_idle_hourly_cost")
        }
        assert idle == {(pool, NODE): cost for pool, cost in expected.items()}
        states = {
            row["pool"]: row["state"]
            for row, value in world.values(body, "kube_resourcepool_state")
            if value == 1
        }
        assert states == {NODE: "usable", MIG_POOL: "usable", "idle-a-empty": "usable"}
        used = {row["pool"] for row, _ in world.values(body, "kube_resourcepool_utilization_ratio")}
        assert used == {NODE, MIG_POOL}, "the pool without devices has no utilisation"
        assert not any(
            math.isnan(float(line.rsplit(" ", 1)[1]))
            for line in body.splitlines()
            if line and not line.startswith("#")
        )
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {
                    "job_name": "kdraexp",
                    "static_configs": [{"targets": [f"127.0.0.1:{running.port}"]}],
                }
            ],
        }
        (panel,) = dashboard.panel("Idle cost per hour")["targets"]
        query = dashboard.as_run(panel["expr"])
        with prometheus.serve(tools.prometheus(), config, tmp_path / "prometheus") as port:

            def figure() -> float | None:
                try:
                    found = prometheus.query(
                        port, 'count(kube_resourcepool_idle_hourly_cost{job="kdraexp"})'
                    )
                except OSError:
                    return None
                if not found or found[0]["value"][1] != "2":
                    return None
                (answer,) = prometheus.query(port, query)
                return float(answer["value"][1])

            total = wait_until(figure, 60, "Prometheus holding the idle cost series")
        assert total == sum(expected.values()) == 7.5
    finally:
        running.stop()


def test_a_released_partition_is_idle_again(cluster: Simulated, tmp_path: Path) -> None:
    """A pod deleted, its claim deallocated by the controller manager: watch mode follows."""
    running = world.exporter(cluster, tmp_path, "watch")
    try:

        def idle_cost() -> dict[str, float] | None:
            code, body = running.scrape()
            if code != 200:
                return None
            found = {
                row["pool"]: value
                for row, value in world.values(body, "kube_resourcepool_idle_hourly_cost")
            }
            return found if found == implied(cluster) else None

        assert wait_until(idle_cost, 30, "the idle cost of the allocations") == {
            NODE: 5.0,
            MIG_POOL: 2.5,
        }
        cluster.delete_pod(world.NAMESPACE, "small-1")

        def released() -> bool:
            held = [
                claim
                for claim in cluster.kube.get(world.CLAIMS)["items"]
                if claim.get("status", {}).get("allocation")
            ]
            return len(held) == 2

        wait_until(released, world.SCHEDULED, "the deleted pod's claim released")
        followed = wait_until(idle_cost, 30, "the exporter following the release")
        assert followed == {NODE: 5.0, MIG_POOL: 3.75}
    finally:
        running.stop()
