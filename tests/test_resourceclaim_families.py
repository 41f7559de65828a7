"""The ResourceClaim families: owner, age, state, demand, results, shares, conditions, cost."""

from __future__ import annotations

from typing import Any

import pytest

from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from tests.collect import collect, labels, values
from tests.objects import NVIDIA, classy, gpu, new_claim, pool_slice, result

OWNED: dict[str, Any] = {
    "ownerReferences": [{"kind": "Pod", "name": "trainer-0", "controller": True}]
}


def shareable(name: str = "gpu-0") -> dict[str, Any]:
    """A device several claims may share (KEP-5075), 80Gi of memory."""
    return gpu(name, allowMultipleAllocations=True)


def test_info_owner_and_created() -> None:
    """info names the controller owner; created is the creation time in Unix seconds."""
    not_controller: dict[str, Any] = {
        "ownerReferences": [{"kind": "Job", "name": "j", "controller": False}]
    }
    claims = [new_claim("owned", **OWNED), new_claim("standalone", **not_controller)]
    collection = collect(claims=claims)
    assert values(
        collection,
        "kube_resourceclaim_info",
        "resourceclaim_name",
        "uid",
        "owner_kind",
        "owner_name",
    ) == {
        ("owned", "uid-owned", "Pod", "trainer-0"): 1,
        ("standalone", "uid-standalone", "", ""): 1,
    }
    assert values(collection, "kube_resourceclaim_created", "resourceclaim_name") == {
        ("owned",): 1795881600,
        ("standalone",): 1795881600,
    }


@pytest.mark.parametrize(
    ("claim", "state"),
    [
        (new_claim("c"), "pending"),
        (new_claim("c", [result("gpu-0")]), "allocated"),
        (new_claim("c", [result("gpu-0")], reserved=True), "reserved"),
        (new_claim("c", [result("gpu-0")], deletionTimestamp="2026-11-30T00:00:00Z"), "deleting"),
    ],
)
def test_one_state(claim: dict[str, Any], state: str) -> None:
    """Only the active state is written, by kubectl's rule."""
    assert values(collect(claims=[claim]), "kube_resourceclaim_status_state", "state") == {
        (state,): 1
    }


def test_request_counts() -> None:
    """count (default 1), All counts the results given, alternatives side by side."""
    requests: list[dict[str, Any]] = [
        {"name": "two", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
        {"name": "one", "exactly": {"deviceClassName": "mig.nvidia.com"}},
        {"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        {
            "name": "alt",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "h100.nvidia.com"},
                {"name": "small", "deviceClassName": "mig.nvidia.com", "count": 3},
            ],
        },
    ]
    results = [
        result("a", request="all"),
        result("b", request="all"),
        result("c", request="alt/small"),
    ]
    written = collect(claims=[new_claim("c", results, requests=requests)])
    assert values(
        written,
        "kube_resourceclaim_request_devices",
        "request",
        "deviceclass_name",
        "allocation_mode",
    ) == {
        ("two", "gpu.nvidia.com", "ExactCount"): 2,
        ("one", "mig.nvidia.com", "ExactCount"): 1,
        ("all", "gpu.nvidia.com", "All"): 2,
        ("alt/big", "h100.nvidia.com", "ExactCount"): 1,
        ("alt/small", "mig.nvidia.com", "ExactCount"): 3,
    }
    pending = collect(claims=[new_claim("c", requests=requests[2:3])])
    assert values(pending, "kube_resourceclaim_request_devices", "request") == {("all",): 0}


def test_allocation_results() -> None:
    """Each result with the class of the request (or alternative) it answers, admin and share."""
    requests: list[dict[str, Any]] = [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
        {"name": "watch", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}},
        {"name": "alt", "firstAvailable": [{"name": "mig", "deviceClassName": "mig.nvidia.com"}]},
    ]
    results = [
        result("gpu-0"),
        result("gpu-1", request="watch"),
        result("gpu-2", request="alt/mig", shareID="s-1"),
        result("gpu-3", request="unknown"),
    ]
    written = collect(claims=[new_claim("c", results, requests=requests)])
    assert values(
        written,
        "kube_resourceclaim_allocation_result_info",
        "request",
        "device_name",
        "deviceclass_name",
        "admin_access",
        "share_id",
    ) == {
        ("gpu", "gpu-0", "gpu.nvidia.com", "false", ""): 1,
        ("watch", "gpu-1", "gpu.nvidia.com", "true", ""): 1,
        ("alt/mig", "gpu-2", "mig.nvidia.com", "false", "s-1"): 1,
        ("unknown", "gpu-3", "", "false", ""): 1,
    }


def test_consumed_capacity_and_conditions() -> None:
    """Shares of shareable devices, and the conditions drivers report (status lower-cased)."""
    claim = new_claim(
        "c",
        [result("gpu-0", shareID="s-1", consumedCapacity={"memory": "20Gi", "cores": "lots"})],
    )
    claim["status"]["devices"] = [
        {
            "driver": NVIDIA,
            "pool": "pool",
            "device": "gpu-0",
            "shareID": "s-1",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "Lost"},
                {"type": "Healthy", "status": "Unknown"},
                {"type": "Odd", "status": "Maybe"},
            ],
        }
    ]
    written = collect(claims=[claim])
    assert values(
        written,
        "kube_resourceclaim_allocation_consumed_capacity",
        "device_name",
        "share_id",
        "capacity",
    ) == {("gpu-0", "s-1", "memory"): 20 * 2**30}
    assert values(
        written, "kube_resourceclaim_status_device_condition", "device_name", "condition", "status"
    ) == {("gpu-0", "Ready", "false"): 1, ("gpu-0", "Healthy", "unknown"): 1}
    assert sorted((p.field, p.message) for p in written.problems) == [
        (
            "consumedCapacity",
            f"ResourceClaim workloads/c device {NVIDIA}/pool/gpu-0 consumedCapacity cores: "
            "not a Kubernetes quantity: 'lots'",
        ),
        (
            "status.devices",
            "ResourceClaim workloads/c device gpu-0 condition: expected a type and a status of "
            "True, False or Unknown, got {'type': 'Odd', 'status': 'Maybe'}",
        ),
    ]


def test_bad_creation_time() -> None:
    """A creationTimestamp that cannot be read costs the created row only."""
    written = collect(claims=[new_claim("c", creationTimestamp="yesterday")])
    assert labels(written, "kube_resourceclaim_created") == []
    assert len(labels(written, "kube_resourceclaim_info")) == 1
    assert [p.field for p in written.problems] == ["metadata.creationTimestamp"]


def cost(*claims: dict[str, Any], devices: list[dict[str, Any]] | None = None) -> Any:
    classes = [classy("gpu.nvidia.com", cost="2.50"), classy("free.nvidia.com")]
    slices = [pool_slice("s", devices or [gpu("gpu-0"), gpu("gpu-1"), shareable("shared")])]
    return collect(claims=claims, slices=slices, classes=classes)


def test_cost_per_class_of_each_claim() -> None:
    """A class's cost times the devices of that class; admin results and costless classes free."""
    requests: list[dict[str, Any]] = [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}},
        {"name": "free", "exactly": {"deviceClassName": "free.nvidia.com"}},
        {"name": "watch", "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True}},
    ]
    results = [
        result("gpu-0"),
        result("gpu-1"),
        result("gpu-0", request="free"),
        result("gpu-1", request="watch", adminAccess=True),
    ]
    written = cost(new_claim("c", results, requests=requests), new_claim("pending"))
    assert values(
        written, "kube_resourceclaim_hourly_cost", "resourceclaim_name", "deviceclass_name"
    ) == {("c", "gpu.nvidia.com"): 5.0}


def test_cost_of_a_share() -> None:
    """A shareable device costs each claim the part of its memory the claim consumes."""
    quarter = result("shared", shareID="s-1", consumedCapacity={"memory": "20Gi"})
    unknown = result("shared", shareID="s-2", consumedCapacity={"cores": "1"})
    written = cost(new_claim("quarter", [quarter]), new_claim("unknown", [unknown]))
    assert values(written, "kube_resourceclaim_hourly_cost", "resourceclaim_name") == {
        ("quarter",): 0.625
    }
    assert [p.message for p in written.problems] == [
        f"ResourceClaim workloads/unknown device {NVIDIA}/pool/shared: the share of the shareable "
        "device used is unknown (no consumed capacity, or no such capacity on the device), so it "
        "costs nothing"
    ]


def test_allocation_timestamp() -> None:
    """Written when the scheduler set it; absent otherwise; malformed is a counted problem."""
    stamped = new_claim("stamped", [result("gpu-0")])
    stamped["status"]["allocation"]["allocationTimestamp"] = "2026-11-30T00:00:10Z"
    broken = new_claim("broken", [result("gpu-1")])
    broken["status"]["allocation"]["allocationTimestamp"] = 12
    written = collect(claims=[stamped, new_claim("plain", [result("gpu-2")]), broken])
    assert values(
        written, "kube_resourceclaim_status_allocation_timestamp_seconds", "resourceclaim_name"
    ) == {("stamped",): 1795996810}
    assert [p.field for p in written.problems] == ["status.allocation.allocationTimestamp"]


NIC = "nic.example.com"
"""A network driver that takes a NIC out of its slice while the NIC is allocated."""


def orphans(hiding: str = "") -> dict[tuple[str, ...], float]:
    """The orphaned results of one cluster, by claim, device and reason.

    *hiding* is the value of ``--hides-allocated-devices``.
    """
    slices = [
        pool_slice("a-old", [gpu("gpu-0"), gpu("gpu-1")], pool="a", generation=1),
        pool_slice("a-new", [gpu("gpu-0")], pool="a", generation=2),
        pool_slice("nics", [gpu("nic-1")], pool="node-n", driver=NIC),
    ]
    claims = [
        new_claim("kept", [result("gpu-0", "a")]),
        new_claim("republished", [result("gpu-1", "a")]),
        new_claim("attached", [result("nic-0", "node-n", NIC)]),
        new_claim("node-gone", [result("nic-0", "node-m", NIC)]),
        new_claim("gpu-node-gone", [result("gpu-0", "b")]),
        new_claim("watcher", [result("gpu-1", "a", adminAccess=True)]),
    ]
    chosen = select(
        resources="resourceclaims,resourceslices,deviceclasses,devicetaintrules",
        options=FamilyOptions.from_flags({"hides-allocated-devices": hiding}),
    )
    return values(
        collect(claims=claims, slices=slices, selection=chosen),
        "kube_resourceclaim_allocation_orphaned",
        "resourceclaim_name",
        "driver",
        "pool",
        "device_name",
        "reason",
    )


def test_orphaned_results_say_why() -> None:
    """Republished without the device, pool gone, or hidden by a driver named to do so.

    A driver that hides allocated devices still loses them with its pool; adminAccess results
    are never orphaned.
    """
    gone = {
        ("republished", NVIDIA, "a", "gpu-1", "device_gone"): 1,
        ("node-gone", NIC, "node-m", "nic-0", "pool_gone"): 1,
        ("gpu-node-gone", NVIDIA, "b", "gpu-0", "pool_gone"): 1,
    }
    assert orphans() == {**gone, ("attached", NIC, "node-n", "nic-0", "device_gone"): 1}
    assert orphans(hiding=NIC) == {
        **gone,
        ("attached", NIC, "node-n", "nic-0", "hidden_by_driver"): 1,
    }


def bound(name: str, *statuses: tuple[str, list[tuple[str, str]]]) -> dict[str, Any]:
    """A claim whose one device binds (attached, ready; failure: failed), with device statuses.

    Each status is (shareID, [(condition, status)...]) for the device, in the order written.
    """
    made = new_claim(
        name,
        [
            result(
                "port-0",
                bindingConditions=["attached", "ready"],
                bindingFailureConditions=["failed"],
            ),
            result("gpu-0"),
        ],
        reserved=True,
    )
    made["status"]["devices"] = [
        {
            "driver": NVIDIA,
            "pool": "pool",
            "device": "port-0",
            "shareID": share,
            "conditions": [
                {"type": kind, "status": status, "reason": "R", "message": ""}
                for kind, status in conditions
            ],
        }
        for share, conditions in statuses
    ] + [
        {
            "driver": NVIDIA,
            "pool": "pool",
            "device": "gpu-0",
            "conditions": [{"type": "ready", "status": "False", "reason": "R", "message": ""}],
        }
    ]
    return made


def test_binding_and_failed_conditions_as_the_scheduler_reads_them() -> None:
    """Each binding condition not yet True, each failure condition True, per device.

    As kube-scheduler's PreBind reads them: the first status entry of the device, the first
    condition of a type; a device without binding conditions is not waited for. The claim's
    state stays reserved.
    """
    claims = [
        bound("waiting"),
        bound("half", ("", [("attached", "True"), ("ready", "False")])),
        bound("done", ("", [("attached", "True"), ("ready", "True")])),
        bound("failed", ("", [("attached", "True"), ("failed", "True")])),
        bound(
            "first-entry",
            ("a", [("attached", "True"), ("ready", "Unknown"), ("ready", "True")]),
            ("b", [("attached", "True"), ("ready", "True")]),
        ),
    ]
    written = collect(claims=claims)
    keys = ("resourceclaim_name", "driver", "pool", "device_name", "condition")
    assert values(written, "kube_resourceclaim_allocation_binding", *keys) == {
        ("waiting", NVIDIA, "pool", "port-0", "attached"): 1,
        ("waiting", NVIDIA, "pool", "port-0", "ready"): 1,
        ("half", NVIDIA, "pool", "port-0", "ready"): 1,
        ("failed", NVIDIA, "pool", "port-0", "ready"): 1,
        ("first-entry", NVIDIA, "pool", "port-0", "ready"): 1,
    }
    assert values(written, "kube_resourceclaim_allocation_binding_failed", *keys) == {
        ("failed", NVIDIA, "pool", "port-0", "failed"): 1
    }
    assert set(values(written, "kube_resourceclaim_status_state", "state")) == {("reserved",)}
    assert not written.problems


def test_binding_conditions_of_another_shape_are_counted() -> None:
    """A condition name that is not a string costs that name, counted and logged."""
    odd = new_claim("odd", [result("port-0", bindingConditions=["attached", 7])])
    written = collect(claims=[odd])
    assert values(written, "kube_resourceclaim_allocation_binding", "condition") == {
        ("attached",): 1
    }
    assert [(p.field, p.message) for p in written.problems] == [
        (
            "bindingConditions",
            f"ResourceClaim workloads/odd device {NVIDIA}/pool/port-0 bindingConditions: an "
            "entry is not a name: 7",
        )
    ]


def test_binding_conditions_past_the_api_bound_are_cut_and_counted() -> None:
    """More than the API server's 4 binding conditions: the first 4 read, the rest counted.

    200,000 of them in each of 12 claims' results were all kept, each a row: the exporter
    was killed in its memory limit within a second.
    """
    many = [f"c{n}" for n in range(1000)]
    odd = new_claim("odd", [result("port-0", bindingConditions=many)])
    written = collect(claims=[odd])
    assert values(written, "kube_resourceclaim_allocation_binding", "condition") == {
        (name,): 1 for name in many[:4]
    }
    assert [(p.field, p.message) for p in written.problems] == [
        (
            "bindingConditions",
            f"ResourceClaim workloads/odd device {NVIDIA}/pool/port-0 bindingConditions: 1000 "
            "entries, more than the API server's 4: the first 4 read",
        )
    ]
