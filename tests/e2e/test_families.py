"""The families beyond the original's, against a real 1.36 API server and its gated fields."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.controlplane import Kube
from tests.e2e.families import (
    ADMIN_NAMESPACE,
    ALLOCATED_AT,
    DRIVER,
    NAMESPACE,
    SHARE_A,
    SHARE_B,
)
from tests.e2e.harness import RESOURCES, Exporter, mint_token, write_kubeconfig

pytestmark = pytest.mark.slow
GiB = 2.0**30


@pytest.fixture(scope="module")
def claims(family_claims: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return family_claims


@pytest.fixture(scope="module")
def body(
    kube: Kube, claims: object, families_account: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("families")
    config = write_kubeconfig(directory / "kubeconfig", kube, mint_token(kube, families_account))
    args = ["--resources", ",".join(RESOURCES), "--metric-opt-in-list", ".*"]
    exporter = Exporter(directory / "run", args, {"KUBECONFIG": str(config)})
    try:
        code, text = exporter.scrape()
        assert code == 200, text
        own = exporter.telemetry()
        assert "kube_dra_exporter_list_objects{" in own
        unread = [
            line
            for line in own.splitlines()
            if line.startswith(("kube_dra_exporter_invalid_values", "kube_dra_exporter_cel_errors"))
            # the original's dataset, when its tests ran first, has a class priced "1,5"
            and 'field="hourly-cost"' not in line
        ]
        assert unread == [], exporter.log()
        yield text
    finally:
        assert exporter.stop() == 0


def ours(body: str, family: str, *keys: str) -> dict[tuple[str, ...], float]:
    """One family's samples of this test's objects, keyed by the named labels."""
    found = {}
    for parsed in text_string_to_metric_families(body):
        if parsed.name != family:
            continue
        for sample in parsed.samples:
            labels = sample.labels
            if labels.get("driver", DRIVER) != DRIVER:
                continue
            if labels.get("namespace", NAMESPACE) not in (NAMESPACE, ADMIN_NAMESPACE):
                continue
            if "deviceclass_name" in labels and not labels["deviceclass_name"].startswith("e2e-"):
                continue
            found[tuple(labels[key] for key in keys)] = sample.value
    return found


def test_device_states(body: str) -> None:
    """Partitions block their GPU, taints (and DeviceTaintRules) taint, adminAccess is not use."""
    assert ours(body, "kube_resourceslice_device_state", "pool", "device_name", "state") == {
        ("e2e-part", "full", "blocked"): 1,
        ("e2e-part", "p0", "allocated"): 1,
        ("e2e-part", "p1", "available"): 1,
        ("e2e-health", "broken", "tainted"): 1,
        ("e2e-health", "lost", "allocated"): 1,
        ("e2e-health", "fine", "tainted"): 1,
        ("e2e-share", "shared", "allocated"): 1,
        ("e2e-incomplete", "gpu-0", "unusable"): 1,
        ("e2e-regen", "gpu-0", "available"): 1,
    }
    assert ours(body, "kube_resourcepool_state", "pool", "state") == {
        ("e2e-part", "usable"): 1,
        ("e2e-health", "usable"): 1,
        ("e2e-share", "usable"): 1,
        ("e2e-incomplete", "incomplete"): 1,
        ("e2e-regen", "usable"): 1,
    }
    assert ours(
        body, "kube_resourceslice_device_capacity_available", "device_name", "capacity"
    ) == {("shared", "memory"): 50 * 2**30}
    taints = ("device_name", "key", "value", "effect", "devicetaintrule")
    assert ours(body, "kube_resourceslice_device_taint", *taints) == {
        ("broken", "example.com/xid", "79", "NoSchedule", ""): 1,
        ("lost", "example.com/lost", "", "NoExecute", ""): 1,
        ("fine", "example.com/unmonitored", "", "None", ""): 1,
        ("fine", "example.com/maintenance", "firmware", "NoSchedule", "e2e-drain"): 1,
    }
    held = ("resourceclaim_name", "device_name", "key", "effect", "devicetaintrule", "tolerated")
    assert ours(body, "kube_resourceclaim_allocation_tainted", *held) == {
        ("in-use-lost", "lost", "example.com/lost", "NoExecute", "", "false"): 1
    }
    assert ours(
        body,
        "kube_devicetaintrule_info",
        "devicetaintrule",
        "pool",
        "device_name",
        "key",
        "value",
        "effect",
    ) == {
        ("e2e-drain", "e2e-health", "fine", "example.com/maintenance", "firmware", "NoSchedule"): 1
    }


def test_classes_and_counters(body: str) -> None:
    """CEL selectors (quantity library included) decide classes; shared counters as published."""
    classes = ours(
        body, "kube_resourceslice_device_class", "pool", "device_name", "deviceclass_name"
    )
    plain = [
        ("e2e-part", "full"),
        ("e2e-health", "broken"),
        ("e2e-health", "lost"),
        ("e2e-health", "fine"),
        ("e2e-incomplete", "gpu-0"),
        ("e2e-regen", "gpu-0"),
    ]
    expected = {
        (pool, device, "e2e-gpu"): 1.0 for pool, device in [*plain, ("e2e-share", "shared")]
    }
    expected.update({(pool, device, "e2e-big"): 1.0 for pool, device in plain})
    expected.update(
        {("e2e-part", p, cls): 1.0 for p in ("p0", "p1") for cls in ("e2e-part", "e2e-big")}
    )
    expected[("e2e-share", "shared", "e2e-share")] = 1.0
    assert classes == expected
    assert ours(
        body, "kube_resourceslice_shared_quantity", "resourceslice_name", "counter_set", "counter"
    ) == {
        ("e2e-part-counters", "gpu-0", "memory"): 80 * GiB,
        ("e2e-part-counters", "gpu-0", "slice-0"): 1,
        ("e2e-part-counters", "gpu-0", "slice-1"): 1,
    }
    assert (
        ours(body, "kube_deviceclass_info", "deviceclass_name", "extended_resource_name")[
            ("e2e-gpu", "example.com/e2e-gpu")
        ]
        == 1
    )


def test_pools(body: str) -> None:
    """Generations, completeness, counters and a utilisation that counts a GPU once."""
    assert ours(body, "kube_resourcepool_generation", "pool") == {
        ("e2e-part",): 1,
        ("e2e-health",): 1,
        ("e2e-share",): 1,
        ("e2e-incomplete",): 1,
        ("e2e-regen",): 2,
    }
    slices = ours(body, "kube_resourcepool_slices", "pool", "state")
    assert {
        key: slices[key] for key in slices if key[0] in ("e2e-part", "e2e-incomplete", "e2e-regen")
    } == {
        ("e2e-part", "expected"): 2,
        ("e2e-part", "published"): 2,
        ("e2e-part", "stale"): 0,
        ("e2e-incomplete", "expected"): 2,
        ("e2e-incomplete", "published"): 1,
        ("e2e-incomplete", "stale"): 0,
        ("e2e-regen", "expected"): 1,
        ("e2e-regen", "published"): 1,
        ("e2e-regen", "stale"): 1,
    }
    complete = ours(body, "kube_resourcepool_complete", "pool")
    assert complete[("e2e-incomplete",)] == 0 and complete[("e2e-part",)] == 1
    assert ours(body, "kube_resourcepool_shared_quantity", "pool", "counter", "state") == {
        ("e2e-part", "memory", "total"): 80 * GiB,
        ("e2e-part", "memory", "consumed"): 40 * GiB,
        ("e2e-part", "slice-0", "total"): 1,
        ("e2e-part", "slice-0", "consumed"): 1,
        ("e2e-part", "slice-1", "total"): 1,
        ("e2e-part", "slice-1", "consumed"): 0,
    }
    utilisation = ours(body, "kube_resourcepool_utilization_ratio", "pool")
    assert utilisation[("e2e-part",)] == 0.5, "slice-0 and slice-1 are one placement group"
    assert utilisation[("e2e-health",)] == pytest.approx(1 / 3), (
        "the adminAccess results do not count"
    )
    assert utilisation[("e2e-share",)] == 30 / 80, "20Gi and 10Gi of the shared GPU's 80Gi"
    assert utilisation[("e2e-incomplete",)] == 0.0


def test_claims(body: str, claims: dict[str, dict[str, Any]]) -> None:
    """State, owner, age, demand, results, shares, conditions and cost of real claims."""
    assert ours(body, "kube_resourceclaim_status_state", "resourceclaim_name", "state") == {
        ("waiting", "pending"): 1,
        ("standalone", "pending"): 1,
        ("partition", "allocated"): 1,
        ("in-use-lost", "reserved"): 1,
        ("share-a", "allocated"): 1,
        ("share-b", "allocated"): 1,
        ("watcher", "allocated"): 1,
    }
    info = ours(
        body, "kube_resourceclaim_info", "resourceclaim_name", "uid", "owner_kind", "owner_name"
    )
    assert info[("waiting", claims["waiting"]["metadata"]["uid"], "Pod", "trainer-0")] == 1
    assert info[("standalone", claims["standalone"]["metadata"]["uid"], "", "")] == 1
    allocated_at = ours(
        body, "kube_resourceclaim_status_allocation_timestamp_seconds", "resourceclaim_name"
    )
    assert allocated_at == {("partition",): datetime.fromisoformat(ALLOCATED_AT).timestamp()}
    created = ours(body, "kube_resourceclaim_created", "resourceclaim_name")
    stamp = claims["waiting"]["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    assert created[("waiting",)] == datetime.fromisoformat(stamp).timestamp()
    assert (
        ours(
            body,
            "kube_resourceclaim_request_devices",
            "resourceclaim_name",
            "deviceclass_name",
            "allocation_mode",
        )[("watcher", "e2e-gpu", "All")]
        == 2
    )
    assert ours(
        body,
        "kube_resourceclaim_allocation_result_info",
        "resourceclaim_name",
        "device_name",
        "deviceclass_name",
        "admin_access",
        "share_id",
    ) == {
        ("partition", "p0", "e2e-part", "false", ""): 1,
        ("in-use-lost", "lost", "e2e-gpu", "false", ""): 1,
        ("share-a", "shared", "e2e-share", "false", SHARE_A): 1,
        ("share-b", "shared", "e2e-share", "false", SHARE_B): 1,
        ("watcher", "broken", "e2e-gpu", "true", ""): 1,
        ("watcher", "fine", "e2e-gpu", "true", ""): 1,
    }
    assert ours(
        body, "kube_resourceclaim_allocation_consumed_capacity", "resourceclaim_name", "capacity"
    ) == {
        ("share-a", "memory"): 20 * GiB,
        ("share-b", "memory"): 10 * GiB,
    }
    assert ours(
        body,
        "kube_resourceclaim_status_device_condition",
        "resourceclaim_name",
        "device_name",
        "condition",
        "status",
    ) == {
        ("in-use-lost", "lost", "Ready", "false"): 1,
        ("share-a", "shared", "Ready", "true"): 1,
    }
    assert ours(
        body, "kube_resourceclaim_hourly_cost", "resourceclaim_name", "deviceclass_name"
    ) == {
        ("partition", "e2e-part"): 0.5,
        ("in-use-lost", "e2e-gpu"): 2.0,
        ("share-a", "e2e-share"): pytest.approx(0.4),
        ("share-b", "e2e-share"): pytest.approx(0.2),
    }
