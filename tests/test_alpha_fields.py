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
from kdraexp.families.selection import select
from tests.collect import collect, text
from tests.objects import classy, counters, gpu, new_claim, pool_slice, result

EVERYTHING = select(
    resources=",".join(kind.plural for kind in LIST_ORDER),
    labels_allowlist="*=[*]",
    annotations_allowlist="*=[*]",
)
HALF = [{"counterSet": "gpu-0", "counters": counters(memory="40Gi")}]


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
            "metadata": {"name": "held-pod", "namespace": "workloads", "uid": "u"},
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
    return {"slices": slices, "claims": claims, "pods": pods, "classes": classes}


def with_alpha_fields(objects: dict[str, list[dict[str, Any]]]) -> None:
    """Every 1.37 alpha field (and a newer server's counter snapshots) added, in place."""
    for made in objects["slices"]:
        spec = made["spec"]
        spec["partitionTypeAttribute"] = "gpu.nvidia.com/profile"  # DRAPartitionableDevicesType
        spec["skipNodeOperations"] = ["NodePrepareResources", "*"]  # DRAOptionalNodeOperations
        for device in spec.get("devices") or ():
            for consumed in device.get("consumesCounters", ()):
                consumed["compatibilityGroups"] = ["mig", "vgpu"]  # DRADeviceCompatibilityGroups
            device["attributes"]["numaNodes"] = {"ints": [0, 1]}  # DRAListTypeAttributes
            device["attributes"]["links"] = {"strings": ["nvlink", "pcie"]}
            device["attributes"]["modes"] = {"bools": [True, False]}
            device["attributes"]["drivers"] = {"versions": ["1.2.3", "2.0.0"]}
            device["nodeAllocatableResources"] = {  # DRANodeAllocatableResources
                "cpu": {"mapping": {"capacityKey": "cores", "capacityMultiplier": "1"}},
                "memory": {"overhead": {"perPod": "1Gi", "perContainer": "64Mi"}},
            }
    derived = [{"name": "gpu.nvidia.com/pair", "expression": 'device.attributes["x"].y'}]
    for claim in objects["claims"]:
        for request in claim["spec"]["devices"]["requests"]:
            if "exactly" in request:
                request["exactly"]["derivedAttributes"] = derived  # DRADerivedAttributes
            for alternative in request.get("firstAvailable", ()):
                alternative["derivedAttributes"] = derived
        allocation = claim.get("status", {}).get("allocation")
        if allocation is not None:
            for found in allocation["devices"]["results"]:
                found["skipNodeOperations"] = ["NodeUnprepareResources"]
                found["consumedCounters"] = [  # a counter snapshot (not in 1.37.2's API)
                    {"counterSet": "gpu-0", "counters": counters(memory="40Gi")}
                ]
                found["compatibilityGroups"] = ["mig"]
            claim["status"]["reservedFor"].append(  # DRAWorkloadResourceClaims
                {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "v"}
            )
    for pod in objects["pods"]:
        pod["spec"]["schedulingGroup"] = {"podGroupName": "g"}  # DRAWorkloadResourceClaims
        pod["status"] = {
            "nodeAllocatableResourceClaimStatuses": [  # DRANodeAllocatableResources
                {
                    "resourceClaimName": "held",
                    "containers": ["c"],
                    "mapping": [{"name": "cpu", "quantity": "4"}],
                    "overhead": [{"name": "memory", "perPod": "1Gi"}],
                }
            ]
        }


def test_alpha_fields_are_read_as_absent() -> None:
    """Decoded, unreported, and every family's samples as without them.

    The one difference: the claim reserved for a PodGroup as well as its pod has that
    consumer too (``kube_resourceclaim_status_reserved_for_pod`` and ``_reserved_total`` count
    core pods alone, so they do not change).
    """
    plain, alpha = cluster(), cluster()
    with_alpha_fields(alpha)
    written = [
        collect(
            slices=objects["slices"],
            claims=objects["claims"],
            classes=objects["classes"],
            pods=objects["pods"],
            selection=EVERYTHING,
        )
        for objects in (plain, alpha)
    ]
    assert [collection.problems for collection in written] == [[], []]
    assert text(written[1]) == text(written[0])
    assert 'kube_resourceclaim_status_reserved_total{namespace="workloads",' in text(written[1])
    assert 'kube_resourceclaim_hourly_cost{namespace="workloads",resourceclaim_name="held",' in (
        text(written[1])
    )
