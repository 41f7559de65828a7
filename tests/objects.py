"""DRA objects for tests, shaped as resource.k8s.io/v1 sends them."""

from __future__ import annotations

from typing import Any


def claim(
    name: str,
    namespace: str = "workloads",
    results: list[tuple[str, str, str]] | None = None,
    reserved_for: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim; *results* are (driver, pool, device); None leaves it pending."""
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": d, "pool": p, "device": dev}
                    for d, p, dev in results
                ]
            }
        }
    if reserved_for is not None:
        status["reservedFor"] = reserved_for
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": status,
    }


def device(
    name: str,
    capacity: dict[str, str] | None = None,
    attributes: dict[str, dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A device with capacities given as quantity strings."""
    return {
        "name": name,
        "attributes": attributes or {},
        "capacity": {key: {"value": value} for key, value in (capacity or {}).items()},
        **extra,
    }


def resource_slice(
    name: str,
    devices: list[dict[str, Any]] | None = None,
    driver: str = "gpu.example",
    pool: str = "pool",
    generation: int = 1,
    count: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    """A ResourceSlice as the API takes it, the one builder of every test's slices.

    *spec* adds nodeName, allNodes, nodeSelector, perDeviceNodeSelection, sharedCounters...;
    without *devices* the slice has none (a slice of shared counters).
    """
    body: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        **spec,
    }
    if devices is not None:
        body["devices"] = devices
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": body,
    }


def device_class(name: str, cost: str | None = None) -> dict[str, Any]:
    """A DeviceClass, with an hourly-cost annotation when *cost* is given."""
    metadata: dict[str, Any] = {"name": name}
    if cost is not None:
        metadata["annotations"] = {"hourly-cost": cost}
    return {"metadata": metadata, "spec": {"selectors": []}}


GPU0 = device(
    "gpu0", {"memory": "1Gi", "multiprocessors": "16", "decoders": "2"}, {"type": {"string": "gpu"}}
)

SEED_CLAIM = claim(
    "claim",
    results=[("gpu.example", "pool", "gpu0")],
    reserved_for=[
        {"resource": "pods", "name": "worker", "uid": "uid"},
        {"resource": "jobs", "name": "ignored"},
    ],
)
SEED_SLICE = resource_slice("slice", [GPU0], nodeName="worker-node")
SEED_CLASS = device_class("gpu", "2.50")

SEED_LINES = [
    'kube_resourceclaim_status_allocated_device{device_name="gpu0",driver="gpu.example",'
    'namespace="workloads",pool="pool",resourceclaim_name="claim"} 1',
    'kube_resourceclaim_status_reserved_for_pod{namespace="workloads",pod_name="worker",'
    'resourceclaim_name="claim",uid="uid"} 1',
    'kube_resourceclaim_status_reserved_total{namespace="workloads",resourceclaim_name="claim"} 1',
    'kube_resourceslice_device_capacity_memory_bytes{device_name="gpu0",driver="gpu.example",'
    'node_name="worker-node",parent_uuid="",pool="pool",product_name="",resourceslice_name="slice",'
    'type="gpu"} 1.073741824e+09',
    'kube_resourceslice_device_capacity_multiprocessors{device_name="gpu0",driver="gpu.example",'
    'node_name="worker-node",parent_uuid="",pool="pool",product_name="",resourceslice_name="slice",'
    'type="gpu"} 16',
    'kube_resourceslice_device_capacity_decoders{device_name="gpu0",driver="gpu.example",'
    'node_name="worker-node",parent_uuid="",pool="pool",product_name="",resourceslice_name="slice",'
    'type="gpu"} 2',
    'kube_deviceclass_hourly_cost{deviceclass_name="gpu"} 2.5',
]
"""The exact lines of the original's successful-scrape test."""


# --- Shapes of the newer fields, as the drivers publish them ------------------------------------

NVIDIA = "gpu.nvidia.com"


def attributes(**values: str | int | bool) -> dict[str, dict[str, Any]]:
    """Device attributes from plain values; a string starting with "v:" is a version."""
    found: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        key = name.replace("__", "/").replace("_dot_", ".")
        if isinstance(value, bool):
            found[key] = {"bool": value}
        elif isinstance(value, int):
            found[key] = {"int": value}
        elif value.startswith("v:"):
            found[key] = {"version": value[2:]}
        else:
            found[key] = {"string": value}
    return found


def counters(**values: str) -> dict[str, dict[str, str]]:
    """A counters map (memory_slice_0 is written memory-slice-0)."""
    return {name.replace("_", "-"): {"value": value} for name, value in values.items()}


def gpu(
    name: str,
    kind: str = "gpu",
    product: str = "NVIDIA A100 80GB PCIe",
    capacity: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """An NVIDIA device (full GPU or MIG) with the attributes the driver publishes."""
    values: dict[str, str | int | bool] = {
        "type": kind,
        "uuid": f"{'MIG' if kind == 'mig' else 'GPU'}-{name}",
        "productName": product,
        "driverVersion": "v:580.95.5",
    }
    if kind == "mig":
        values["parentUUID"] = "GPU-parent"
        values["profile"] = "1g.10gb"
    return device(name, capacity or {"memory": "80Gi"}, attributes(**values), **extra)


def result(device: str, pool: str = "pool", driver: str = NVIDIA, **extra: Any) -> dict[str, Any]:
    """One allocation result."""
    return {"request": "gpu", "driver": driver, "pool": pool, "device": device, **extra}


def new_claim(
    name: str,
    results: list[dict[str, Any]] | None = None,
    namespace: str = "workloads",
    requests: list[dict[str, Any]] | None = None,
    reserved: bool = False,
    **metadata: Any,
) -> dict[str, Any]:
    """A ResourceClaim in full: requests, results (None: pending), metadata fields."""
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {"devices": {"results": results}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": f"{name}-pod", "uid": "u"}]
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-11-28T16:00:00Z",
            **metadata,
        },
        "spec": {
            "devices": {
                "requests": requests
                or [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
        "status": status,
    }


def pool_slice(
    name: str,
    devices: list[dict[str, Any]] | None = None,
    pool: str = "pool",
    generation: int = 1,
    count: int = 1,
    driver: str = NVIDIA,
    **spec: Any,
) -> dict[str, Any]:
    """A ResourceSlice of a pool at a generation on the node of its name, with a version."""
    made = resource_slice(name, devices, driver, pool, generation, count, nodeName=pool, **spec)
    made["metadata"]["resourceVersion"] = "1"
    return made


def classy(name: str, expression: str | None = None, cost: str | None = None) -> dict[str, Any]:
    """A DeviceClass with one CEL selector (or none) and an optional hourly cost."""
    made = device_class(name, cost)
    made["metadata"]["creationTimestamp"] = "2026-11-01T08:00:00Z"
    made["metadata"]["resourceVersion"] = "1"
    made["spec"] = {"selectors": [{"cel": {"expression": expression}}] if expression else []}
    return made
