"""Whether a claim keeps a tainted device: kube-controller-manager's eviction controller judges.

A simulated cluster of its own (tests/e2e/simulated.py), one Node and four devices.  Three pods'
claims tolerate a taint key, each differently: exactly (effect NoExecute, no seconds), without
an effect (which the allocator accepts), and with tolerationSeconds.  The scheduler allocates
them and copies the tolerations into the results; then a NoExecute DeviceTaintRule selects
every device.  The exporter is scraped while the controller manager is paused, so before any
eviction; once it runs again, the eviction controller must evict exactly the holders whose
``tolerated`` the exporter wrote as "false", the one without an effect at once and the one with
seconds when they have run out, and leave the first alone.  The test writes no status.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import simworld as world
from tests.e2e.harness import wait_until
from tests.e2e.simulated import Simulated, start_simulated

CLAIMS = f"{world.RESOURCE}/namespaces/{world.NAMESPACE}/resourceclaims"
RULES = f"{world.RESOURCE}/devicetaintrules"
NODE = "evict-a"
KEY = "example.com/link-down"
RULE = "evict-link-down"
SECONDS = 60
"""The third holder's tolerationSeconds: long enough that the second is evicted well before."""
TOLERATIONS = {
    "exact": {"key": KEY, "operator": "Exists", "effect": "NoExecute"},
    "no-effect": {"key": KEY, "operator": "Exists"},
    "seconds": {
        "key": KEY,
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": SECONDS,
    },
}
KEPT = {"exact": "true", "no-effect": "false", "seconds": "false"}
"""What the exporter must say of each holder: as the eviction controller will act."""


def holder(name: str) -> dict[str, Any]:
    """A claim for one GPU tolerating the taint key as *name* says."""
    return world.claim(name, "evict-gpu", count=1, tolerations=[TOLERATIONS[name]])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    simulated = start_simulated(tmp_path_factory.mktemp("eviction"))
    kube = simulated.kube
    try:
        simulated.add_node(NODE)
        simulated.add_namespace(world.NAMESPACE)
        kube.create(f"{world.RESOURCE}/deviceclasses", world.device_class("evict-gpu", "gpu"))
        devices = [world.gpu(NODE, f"gpu-{index}") for index in range(4)]
        kube.create(
            f"{world.RESOURCE}/resourceslices", world.pool_slice(NODE, NODE, NODE, devices=devices)
        )
        for name in TOLERATIONS:
            kube.create(CLAIMS, holder(name))
            kube.create(world.PODS, world.pod(name, {"resourceClaimName": name}))
        for name in TOLERATIONS:
            wait_until(partial(world.bound, simulated, name), world.SCHEDULED, f"{name} scheduled")
        yield simulated
    finally:
        simulated.stop()


def evicted(cluster: Simulated, name: str) -> dict[str, Any] | None:
    """The DisruptionTarget condition the eviction controller put on pod *name*, once deleted."""
    got = cluster.kube.get(f"{world.PODS}/{name}")
    if not got["metadata"].get("deletionTimestamp"):
        return None
    for condition in got.get("status", {}).get("conditions", []):
        if condition["type"] == "DisruptionTarget":
            assert condition["reason"] == "DeletionByDeviceTaintManager", condition
            return dict(condition)
    raise AssertionError(f"{name} deleted, but not by the eviction controller: {got['status']}")


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def completed(cluster: Simulated) -> dict[str, Any] | None:
    """The rule's EvictionInProgress condition once the controller says it evicted all it will."""
    rule = cluster.kube.get(f"{RULES}/{RULE}")
    for condition in rule.get("status", {}).get("conditions", []):
        if condition["type"] == "EvictionInProgress" and condition["reason"] == "Completed":
            return dict(condition)
    return None


def test_tolerated_is_what_the_eviction_controller_does(cluster: Simulated, tmp_path: Path) -> None:
    """The exporter's ``tolerated`` before the evictions is what the controller then does."""
    kube = cluster.kube
    held = {}
    for name in TOLERATIONS:
        (result,) = kube.get(f"{CLAIMS}/{name}")["status"]["allocation"]["devices"]["results"]
        assert result["tolerations"] == [TOLERATIONS[name]], result  # copied by the scheduler
        held[name] = result["device"]
    manager = cluster.components[1]  # start_simulated starts the scheduler, then the manager
    assert "kube-controller-manager" in str(manager.args)
    os.kill(manager.pid, signal.SIGSTOP)
    try:
        kube.create(RULES, world.taint_rule(RULE, KEY, "NoExecute", pool=NODE))
        body = world.scrape_once(cluster, tmp_path / "paused")
        for name in TOLERATIONS:  # the controller is paused: nothing is evicted yet
            assert not kube.get(f"{world.PODS}/{name}")["metadata"].get("deletionTimestamp"), name
    finally:
        os.kill(manager.pid, signal.SIGCONT)
    tainted = {
        (row["resourceclaim_name"], row["device_name"], row["devicetaintrule"]): row["tolerated"]
        for row in world.samples(body, "kube_resourceclaim_allocation_tainted")
        if row["key"] == KEY and row["effect"] == "NoExecute"
    }
    assert tainted == {(name, held[name], RULE): KEPT[name] for name in TOLERATIONS}
    taints = {
        (row["device_name"], row["devicetaintrule"])
        for row in world.samples(body, "kube_resourceslice_device_taint")
        if row["key"] == KEY and row["effect"] == "NoExecute" and row["pool"] == NODE
    }
    assert taints == {(f"gpu-{index}", RULE) for index in range(4)}  # allocated ones included

    added = seconds(kube.get(f"{RULES}/{RULE}")["spec"]["taint"]["timeAdded"])
    wait_until(
        partial(evicted, cluster, "no-effect"), world.SCHEDULED, "the holder without effect evicted"
    )
    assert evicted(cluster, "seconds") is None, "evicted before its tolerationSeconds ran out"
    late = wait_until(
        partial(evicted, cluster, "seconds"),
        SECONDS + world.SCHEDULED,
        "the holder with seconds evicted",
    )
    assert seconds(late["lastTransitionTime"]) >= added + SECONDS, (late, added)
    wait_until(partial(completed, cluster), world.SCHEDULED, "the rule's evictions completed")
    assert evicted(cluster, "exact") is None
    assert world.bound(cluster, "exact") == NODE
