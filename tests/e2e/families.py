"""Objects with the newer DRA fields, written to a real API server, and the samples they imply.

Kubernetes 1.36 serves partitionable devices (shared and consumed counters), device taints,
consumable capacity (shares), device status and, with DRADeviceTaintRules, DeviceTaintRules:
the API server, not a fake, is the proof that these shapes are real.  Everything here is of the
driver ``gpu.e2e.example`` and the namespaces ``families``/``families-admin``, so these samples
can be told from the other tests'.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.controlplane import Kube
from tests.e2e.simworld import claim, device
from tests.objects import resource_slice

V1 = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.e2e.example"
NAMESPACE = "families"
ADMIN_NAMESPACE = "families-admin"
SHARE_A = "2f9a6c1e-7d4b-4e38-b5a0-c3e81f7d9b26"
SHARE_B = "9b3d7e5a-0c2f-4a81-96e4-2f8c1a5d7e03"
ALLOCATED_AT = "2026-11-30T10:00:05Z"
"""The scheduler's allocationTimestamp on one claim (DRADeviceBindingConditions, on in 1.36)."""


def counters(**values: str) -> dict[str, dict[str, str]]:
    return {name.replace("_", "-"): {"value": value} for name, value in values.items()}


def gpu(pool: str, name: str, kind: str = "gpu", **extra: Any) -> dict[str, Any]:
    """A device of 80Gi of memory."""
    return device(pool, name, kind, memory="80Gi", **extra)


def slice_of(name: str, pool: str, generation: int, count: int, **spec: Any) -> dict[str, Any]:
    return resource_slice(
        name, driver=DRIVER, pool=pool, generation=generation, count=count, nodeName=pool, **spec
    )


EVERY = counters(memory="80Gi", slice_0="1", slice_1="1")


def partition(name: str, slice_index: int) -> dict[str, Any]:
    needs = counters(memory="40Gi", **{f"slice_{slice_index}": "1"})
    return gpu(
        "e2e-part", name, "partition", consumesCounters=[{"counterSet": "gpu-0", "counters": needs}]
    )


SLICES = [
    slice_of(
        "e2e-part-counters", "e2e-part", 1, 2, sharedCounters=[{"name": "gpu-0", "counters": EVERY}]
    ),
    slice_of(
        "e2e-part-devices",
        "e2e-part",
        1,
        2,
        devices=[
            gpu("e2e-part", "full", consumesCounters=[{"counterSet": "gpu-0", "counters": EVERY}]),
            partition("p0", 0),
            partition("p1", 1),
        ],
    ),
    slice_of(
        "e2e-health",
        "e2e-health",
        1,
        1,
        devices=[
            gpu(
                "e2e-health",
                "broken",
                taints=[{"key": "example.com/xid", "value": "79", "effect": "NoSchedule"}],
            ),
            gpu("e2e-health", "lost", taints=[{"key": "example.com/lost", "effect": "NoExecute"}]),
            gpu(
                "e2e-health", "fine", taints=[{"key": "example.com/unmonitored", "effect": "None"}]
            ),
        ],
    ),
    slice_of(
        "e2e-share",
        "e2e-share",
        1,
        1,
        devices=[gpu("e2e-share", "shared", allowMultipleAllocations=True)],
    ),
    slice_of("e2e-incomplete-1", "e2e-incomplete", 1, 2, devices=[gpu("e2e-incomplete", "gpu-0")]),
    slice_of("e2e-regen-old", "e2e-regen", 1, 1, devices=[gpu("e2e-regen", "gpu-0")]),
    slice_of("e2e-regen-new", "e2e-regen", 2, 1, devices=[gpu("e2e-regen", "gpu-0")]),
]


def device_class(
    name: str, expression: str, cost: str | None = None, **spec: Any
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if cost is not None:
        metadata["annotations"] = {"hourly-cost": cost}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": metadata,
        "spec": {"selectors": [{"cel": {"expression": expression}}], **spec},
    }


ON_DRIVER = f"device.driver == '{DRIVER}'"
CLASSES = [
    device_class(
        "e2e-gpu",
        f"{ON_DRIVER} && device.attributes['{DRIVER}'].type == 'gpu'",
        "2.00",
        extendedResourceName="example.com/e2e-gpu",
    ),
    device_class(
        "e2e-part", f"{ON_DRIVER} && device.attributes['{DRIVER}'].type == 'partition'", "0.50"
    ),
    device_class("e2e-share", f"{ON_DRIVER} && device.allowMultipleAllocations", "1.60"),
    device_class(
        "e2e-big",
        f"{ON_DRIVER} && device.capacity['{DRIVER}'].memory.compareTo(quantity('64Gi')) >= 0 "
        "&& !device.allowMultipleAllocations",
    ),
]

TAINT_RULE = {
    "apiVersion": "resource.k8s.io/v1beta2",
    "kind": "DeviceTaintRule",
    "metadata": {"name": "e2e-drain"},
    "spec": {
        "deviceSelector": {"driver": DRIVER, "pool": "e2e-health", "device": "fine"},
        "taint": {"key": "example.com/maintenance", "value": "firmware", "effect": "NoSchedule"},
    },
}


def result(device: str, pool: str, **extra: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device, **extra}


def ready(device: str, pool: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "driver": DRIVER,
        "pool": pool,
        "device": device,
        **extra,
        "conditions": [
            {
                "type": "Ready",
                "status": status,
                "reason": "Prepared" if status == "True" else "DeviceLost",
                "message": "",
                "lastTransitionTime": "2026-11-30T10:00:00Z",
            }
        ],
    }


# name -> (namespace, class, request fields, status, owner pod or None)
CLAIMS: dict[str, tuple[str, str, dict[str, Any], dict[str, Any] | None, str | None]] = {
    "waiting": (NAMESPACE, "e2e-gpu", {}, None, "trainer-0"),
    "standalone": (NAMESPACE, "e2e-gpu", {}, None, None),
    "partition": (
        NAMESPACE,
        "e2e-part",
        {},
        {
            "allocation": {
                "devices": {"results": [result("p0", "e2e-part")]},
                "allocationTimestamp": ALLOCATED_AT,
            }
        },
        None,
    ),
    "in-use-lost": (
        NAMESPACE,
        "e2e-gpu",
        {},
        {
            "allocation": {"devices": {"results": [result("lost", "e2e-health")]}},
            "reservedFor": [{"resource": "pods", "name": "runner", "uid": "uid-runner"}],
            "devices": [ready("lost", "e2e-health", "False")],
        },
        None,
    ),
    "share-a": (
        NAMESPACE,
        "e2e-share",
        {"capacity": {"requests": {"memory": "20Gi"}}},
        {
            "allocation": {
                "devices": {
                    "results": [
                        result(
                            "shared",
                            "e2e-share",
                            shareID=SHARE_A,
                            consumedCapacity={"memory": "20Gi"},
                        )
                    ]
                }
            },
            "devices": [ready("shared", "e2e-share", "True", shareID=SHARE_A)],
        },
        None,
    ),
    "share-b": (
        NAMESPACE,
        "e2e-share",
        {"capacity": {"requests": {"memory": "10Gi"}}},
        {
            "allocation": {
                "devices": {
                    "results": [
                        result(
                            "shared",
                            "e2e-share",
                            shareID=SHARE_B,
                            consumedCapacity={"memory": "10Gi"},
                        )
                    ]
                }
            }
        },
        None,
    ),
    "watcher": (
        ADMIN_NAMESPACE,
        "e2e-gpu",
        {"adminAccess": True, "allocationMode": "All"},
        {
            "allocation": {
                "devices": {
                    "results": [
                        result("broken", "e2e-health", adminAccess=True),
                        result("fine", "e2e-health", adminAccess=True),
                    ]
                }
            }
        },
        None,
    ),
}


def create_all(kube: Kube, rules: bool = True) -> dict[str, dict[str, Any]]:
    """Create everything; return the claims as the server holds them (uid, creation time).

    Without *rules*, no DeviceTaintRule (a server that serves none).
    """
    for namespace, labels in (
        (NAMESPACE, {}),
        (ADMIN_NAMESPACE, {"resource.kubernetes.io/admin-access": "true"}),
    ):
        kube.create(
            "/api/v1/namespaces",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "labels": labels},
            },
        )
    for obj in CLASSES:
        kube.create(f"{V1}/deviceclasses", obj)
    for obj in SLICES:
        kube.create(f"{V1}/resourceslices", obj)
    if rules:
        kube.create("/apis/resource.k8s.io/v1beta2/devicetaintrules", TAINT_RULE)
    held = {}
    for name, (namespace, deviceclass, exact, status, owner) in CLAIMS.items():
        body = claim(name, deviceclass, request_name="gpu", namespace=namespace, **exact)
        if owner is not None:
            body["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
            ]
        path = f"{V1}/namespaces/{namespace}/resourceclaims"
        created = kube.create(path, body)
        if status is not None:
            created["status"] = status
            created = kube.request("PUT", f"{path}/{name}/status", created)
        held[name] = created
    return held
