"""Objects carrying the fields of Kubernetes 1.37's alpha DRA gates read as if they had none.

A cluster that turns on ``DRADeviceCompatibilityGroups``, ``DRAPartitionableDevicesType``,
``DRADerivedAttributes``, ``DRAListTypeAttributes``, ``DRAOptionalNodeOperations``,
``DRANodeAllocatableResources`` or ``DRAWorkloadResourceClaims`` sends fields the exporter does
not read; a newer server may send counter snapshots in claims (``results[].consumedCounters``).
Shapes as ``k8s.io/api`` v0.37.2 declares them (``resource/v1``, ``core/v1``).  What each does
to the families is in docs/compatibility.md; here: every object still decodes, nothing is
reported unreadable, and every family writes what it writes of the same objects without them.
"""

from __future__ import annotations

import copy
from typing import Any

from kdraexp.dra.listing import LIST_ORDER
from kdraexp.families.options import FamilyOptions
from kdraexp.families.selection import select
from tests.collect import collect, text
from tests.objects import classy, counters, gpu, new_claim, pool_slice, result

EVERYTHING = select(
    resources=",".join(kind.plural for kind in LIST_ORDER),
    options=FamilyOptions.from_flags(
        {"metric-labels-allowlist": "*=[*]", "metric-annotations-allowlist": "*=[*]"}
    ),
)
HALF_MEMORY = counters(memory="40Gi")
HALF = [{"counterSet": "gpu-0", "counters": HALF_MEMORY}]


def cluster() -> dict[str, list[dict[str, Any]]]:
    """A partitioned GPU, a plain one, a claim on a partition, a pending claim, their pods."""
    shared = [{"name": "gpu-0", "counters": counters(memory="80Gi")}]
    slices = [
        pool_slice("counters", pool="node-a", count=2, sharedCounters=shared),
        pool_slice(
            "devices",
            [gpu("mig-0", "mig", consumesCounters=HALF), gpu("whole", "gpu")],
            pool="node-a",
            count=2,
        ),
    ]
    asks: list[dict[str, Any]] = [
        {"name": "gpu", "exactly": {"deviceClassName": "mig", "count": 1}},
        {
            "name": "any",
            "firstAvailable": [{"name": "whole", "deviceClassName": "gpu", "count": 1}],
        },
    ]
    claims = [
        new_claim("held", [result("mig-0", "node-a")], requests=asks[:1], reserved=True),
        new_claim("waiting", None, requests=copy.deepcopy(asks)),
    ]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "held-pod",
                "namespace": "workloads",
                "uid": "u",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                "nodeName": "node-a",
                "containers": [{"name": "c"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "held"}],
            },
        }
    ]
    classes = [
        classy("mig", 'device.attributes["gpu.nvidia.com"].type == "mig"', "0.60"),
        classy("gpu", 'device.attributes["gpu.nvidia.com"].type == "gpu"', "2.50"),
    ]
    made = {"slices": slices, "claims": claims, "pods": pods, "classes": classes}
    return copy.deepcopy(made)  # nothing shared with another call's objects


LIST_ATTRIBUTES = {  # DRAListTypeAttributes
    "numaNodes": {"ints": [0, 1]},
    "links": {"strings": ["nvlink", "pcie"]},
    "modes": {"bools": [True, False]},
    "drivers": {"versions": ["1.2.3", "2.0.0"]},
}
DERIVED = [{"name": "gpu.nvidia.com/pair", "expression": "device.driver"}]
SNAPSHOTS = ("consumedCounters", "compatibilityGroups")
"""What a result may carry that 1.37.2's API has not: a server that has it keeps it."""
PODGROUP = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "v"}


def with_alpha_fields(objects: dict[str, list[dict[str, Any]]]) -> None:
    """Every 1.37 alpha field (and a newer server's counter snapshots) added, in place.

    As a 1.37.2 API server with the gates on accepts them: a partition type only where devices
    consume counters, a derived attribute only where a constraint compares it.
    """
    for made in objects["slices"]:
        spec = made["spec"]
        spec["skipNodeOperations"] = [  # DRAOptionalNodeOperations
            "NodePrepareResources",
            "NodeUnprepareResources",
        ]
        if spec.get("devices"):
            spec["partitionTypeAttribute"] = "gpu.nvidia.com/type"  # DRAPartitionableDevicesType
        for device in spec.get("devices") or ():
            for consumed in device.get("consumesCounters", ()):
                consumed["compatibilityGroups"] = ["mig", "vgpu"]  # DRADeviceCompatibilityGroups
            device["attributes"].update(copy.deepcopy(LIST_ATTRIBUTES))
            device["nodeAllocatableResources"] = {  # DRANodeAllocatableResources
                "memory": {"mapping": {"capacityKey": "memory", "capacityMultiplier": "1"}},
                "cpu": {"overhead": {"perPod": "100m", "perContainer": "10m"}},
            }
    for claim in objects["claims"]:
        devices = claim["spec"]["devices"]
        for request in devices["requests"]:
            for asked in (request.get("exactly"), *request.get("firstAvailable", ())):
                if asked is not None:
                    asked["derivedAttributes"] = copy.deepcopy(DERIVED)  # DRADerivedAttributes
        devices["constraints"] = [
            {
                "requests": [request["name"] for request in devices["requests"]],
                "matchAttribute": DERIVED[0]["name"],
            }
        ]
        allocation = claim.get("status", {}).get("allocation")
        if allocation is not None:
            for found in allocation["devices"]["results"]:
                found["skipNodeOperations"] = ["NodeUnprepareResources"]
                found["consumedCounters"] = [{"counterSet": "gpu-0", "counters": HALF_MEMORY}]
                found["compatibilityGroups"] = ["mig"]
            claim["status"]["reservedFor"].append(dict(PODGROUP))  # DRAWorkloadResourceClaims
    for pod in objects["pods"]:
        pod["spec"]["schedulingGroup"] = {"podGroupName": "g"}  # DRAWorkloadResourceClaims
        pod.setdefault("status", {})["nodeAllocatableResourceClaimStatuses"] = [
            {  # DRANodeAllocatableResources
                "resourceClaimName": "held",
                "containers": ["c"],
                "mapping": [{"name": "cpu", "quantity": "4"}],
                "overhead": [{"name": "memory", "perPod": "1Gi"}],
            }
        ]


def without_alpha_fields(objects: dict[str, list[dict[str, Any]]]) -> None:
    """What :func:`with_alpha_fields` adds, taken away again, in place."""
    for made in objects["slices"]:
        spec = made["spec"]
        spec.pop("skipNodeOperations", None)
        spec.pop("partitionTypeAttribute", None)
        for device in spec.get("devices") or ():
            for consumed in device.get("consumesCounters", ()):
                consumed.pop("compatibilityGroups", None)
            for name in LIST_ATTRIBUTES:
                device["attributes"].pop(name, None)
            device.pop("nodeAllocatableResources", None)
    for claim in objects["claims"]:
        devices = claim["spec"]["devices"]
        devices.pop("constraints", None)
        for request in devices["requests"]:
            for asked in (request.get("exactly"), *request.get("firstAvailable", ())):
                if asked is not None:
                    asked.pop("derivedAttributes", None)
        allocation = claim.get("status", {}).get("allocation")
        if allocation is not None:
            for found in allocation["devices"]["results"]:
                for field in ("skipNodeOperations", *SNAPSHOTS):
                    found.pop(field, None)
            consumers = claim["status"]["reservedFor"]
            consumers[:] = [c for c in consumers if c.get("resource") != "podgroups"]
    for pod in objects["pods"]:
        pod["spec"].pop("schedulingGroup", None)
        status = pod.get("status", {})
        status.pop("nodeAllocatableResourceClaimStatuses", None)
        if "status" in pod and not status:
            del pod["status"]


def written(objects: dict[str, list[dict[str, Any]]]) -> Any:
    return collect(
        slices=objects["slices"],
        claims=objects["claims"],
        classes=objects["classes"],
        pods=objects["pods"],
        selection=EVERYTHING,
    )


def test_alpha_fields_are_read_as_absent() -> None:
    """Decoded, unreported, and every family's samples as without them.

    The claim reserved for a PodGroup as well as its pod is ``reserved`` either way
    (``kube_resourceclaim_status_reserved_for_pod`` and ``_reserved_total`` count core pods).
    """
    plain, alpha = cluster(), cluster()
    with_alpha_fields(alpha)
    assert alpha != plain
    stripped = copy.deepcopy(alpha)
    without_alpha_fields(stripped)
    assert stripped == plain, "taking the fields away again gives the objects without them"
    made = [written(plain), written(alpha)]
    assert [collection.problems for collection in made] == [[], []]
    assert text(made[1]) == text(made[0])
    assert 'kube_resourceclaim_hourly_cost{namespace="workloads",resourceclaim_name="held",' in (
        text(made[1])
    )
