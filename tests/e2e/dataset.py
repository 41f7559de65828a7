"""The DRA objects the end-to-end tests create, and the samples they must yield."""

from __future__ import annotations

from typing import Any

from tests.e2e.controlplane import Kube
from tests.e2e.simworld import claim
from tests.objects import resource_slice

V1 = "/apis/resource.k8s.io/v1"
NAMESPACE = "team-a"
A100 = "NVIDIA A100 80GB PCIe"
PARENT = "GPU-5d1a8a3e-2f7c-4b1e-9c3a-1f2e3d4c5b6a"


def gpu(name: str, memory: str = "80Gi", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": A100},
            "cudaComputeCapability": {"version": "8.0.0"},
        },
        "capacity": {"memory": {"value": memory}},
        **extra,
    }


MIG: dict[str, Any] = {
    "name": "gpu-1-mig-1g10gb-19-0",
    "attributes": {
        "type": {"string": "mig"},
        "productName": {"string": A100},
        "parentUUID": {"string": PARENT},
        "profile": {"string": "1g.10gb"},
    },
    "capacity": {
        "memory": {"value": "9728Mi"},
        "multiprocessors": {"value": "14"},
        "decoders": {"value": "0"},
        "copyEngines": {"value": "1"},
    },
}


SLICES = [
    resource_slice(
        "node-a-gpu",
        [gpu("gpu-0"), gpu("gpu-1")],
        driver="gpu.nvidia.com",
        pool="node-a",
        nodeName="node-a",
    ),
    resource_slice(
        "node-b-gpu", [gpu("gpu-0"), MIG], driver="gpu.nvidia.com", pool="node-b", nodeName="node-b"
    ),
    resource_slice(
        "fabric-fpga",
        [
            {
                "name": "fpga-0",
                "attributes": {
                    "gpu.nvidia.com/type": {"string": "x"},
                    "fpga.example.com/type": {"string": "fpga"},
                },
                "capacity": {"memory": {"value": "16Gi"}},
            }
        ],
        driver="fpga.example.com",
        pool="fabric",
        allNodes=True,
    ),
    resource_slice(
        "node-c-partitions",
        [gpu("part-0", "40Gi", nodeName="node-c"), gpu("part-1", "40Gi", allNodes=True)],
        driver="gpu.nvidia.com",
        pool="node-c",
        perDeviceNodeSelection=True,
    ),
]

CLASSES = [
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, **({"annotations": {"hourly-cost": cost}} if cost else {})},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
    }
    for name, driver, cost in [
        ("gpu.nvidia.com", "gpu.nvidia.com", "2.50"),
        ("mig.nvidia.com", "gpu.nvidia.com", "0.45"),
        ("fpga.example.com", "fpga.example.com", None),
        ("misconfigured.example.com", "gpu.nvidia.com", "1,5"),
    ]
]

# name -> (allocated (pool, device) on gpu.nvidia.com, pods reserving it)
CLAIMS: dict[str, tuple[list[tuple[str, str]], list[str]]] = {
    "train": ([("node-a", "gpu-0"), ("node-a", "gpu-1")], ["trainer"]),
    "notebook": ([("node-b", "gpu-1-mig-1g10gb-19-0")], ["nb-0", "nb-1"]),
    "allocated-only": ([("node-b", "gpu-0")], []),
    "pending": ([], []),
}


def create_claim(
    kube: Kube, name: str, namespace: str, devices: list[tuple[str, str]], pods: list[str]
) -> None:
    """Create a claim and write its allocation and reservations through the status subresource."""
    path = f"{V1}/namespaces/{namespace}/resourceclaims"
    created = kube.create(
        path,
        labelled(
            claim(
                name,
                "gpu.nvidia.com",
                request_name="gpu",
                namespace=namespace,
                allocationMode="ExactCount",
                count=max(1, len(devices)),
            )
        ),
    )
    if not devices:
        return
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": device}
                    for pool, device in devices
                ]
            }
        }
    }
    if pods:
        created["status"]["reservedFor"] = [
            {"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in pods
        ]
    kube.request("PUT", f"{path}/{name}/status", created)


LABELS = {"team": "research", "app.kubernetes.io/part-of": "e2e-dataset"}
"""The labels of every object of the dataset (what exporters given an allowlist write)."""
ANNOTATIONS = {"example.com/owner": "research@example.com"}
"""An annotation of every object of the dataset, beside a class's hourly-cost."""


def labelled(obj: dict[str, Any]) -> dict[str, Any]:
    """*obj* with the dataset's labels and annotations."""
    meta = obj["metadata"]
    annotations = {**meta.get("annotations", {}), **ANNOTATIONS}
    return {**obj, "metadata": {**meta, "labels": LABELS, "annotations": annotations}}


def create_all(kube: Kube) -> None:
    for obj in CLASSES:
        kube.create(f"{V1}/deviceclasses", labelled(obj))
    for obj in SLICES:
        kube.create(f"{V1}/resourceslices", labelled(obj))
    for name, (devices, pods) in CLAIMS.items():
        create_claim(kube, name, NAMESPACE, devices, pods)


def capacity_labels(
    slice_name: str,
    device: str,
    driver: str,
    pool: str,
    node: str,
    kind: str = "gpu",
    product: str = A100,
    parent: str = "",
) -> str:
    return (
        f'{{device_name="{device}",driver="{driver}",node_name="{node}",parent_uuid="{parent}",'
        f'pool="{pool}",product_name="{product}",resourceslice_name="{slice_name}",type="{kind}"}}'
    )


def expected_lines() -> set[str]:
    """Every DRA sample line the dataset must produce, and nothing else."""
    lines = set()
    for name, (devices, pods) in CLAIMS.items():
        for pool, device in devices:
            lines.add(
                f'kube_resourceclaim_status_allocated_device{{device_name="{device}",'
                f'driver="gpu.nvidia.com",namespace="{NAMESPACE}",pool="{pool}",'
                f'resourceclaim_name="{name}"}} 1'
            )
        for pod in pods:
            lines.add(
                f'kube_resourceclaim_status_reserved_for_pod{{namespace="{NAMESPACE}",'
                f'pod_name="{pod}",resourceclaim_name="{name}",uid="uid-{pod}"}} 1'
            )
        lines.add(
            f'kube_resourceclaim_status_reserved_total{{namespace="{NAMESPACE}",'
            f'resourceclaim_name="{name}"}} {len(pods)}'
        )
    memory = "kube_resourceslice_device_capacity_memory_bytes"
    for slice_name, pool, node in (
        ("node-a-gpu", "node-a", "node-a"),
        ("node-b-gpu", "node-b", "node-b"),
    ):
        for device in ("gpu-0", "gpu-1") if pool == "node-a" else ("gpu-0",):
            lines.add(
                memory
                + capacity_labels(slice_name, device, "gpu.nvidia.com", pool, node)
                + " 8.589934592e+10"
            )
    mig = capacity_labels(
        "node-b-gpu", MIG["name"], "gpu.nvidia.com", "node-b", "node-b", "mig", parent=PARENT
    )
    lines.add(f"{memory}{mig} 1.0200547328e+10")
    lines.add(f"kube_resourceslice_device_capacity_multiprocessors{mig} 14")
    lines.add(f"kube_resourceslice_device_capacity_decoders{mig} 0")
    lines.add(
        memory
        + capacity_labels(
            "fabric-fpga", "fpga-0", "fpga.example.com", "fabric", "", "fpga", product=""
        )
        + " 1.7179869184e+10"
    )
    for device, node in (("part-0", "node-c"), ("part-1", "")):
        lines.add(
            memory
            + capacity_labels("node-c-partitions", device, "gpu.nvidia.com", "node-c", node)
            + " 4.294967296e+10"
        )
    lines.add('kube_deviceclass_hourly_cost{deviceclass_name="gpu.nvidia.com"} 2.5')
    lines.add('kube_deviceclass_hourly_cost{deviceclass_name="mig.nvidia.com"} 0.45')
    return lines


ORIGINAL = (
    "kube_resourceclaim_status_allocated_device{",
    "kube_resourceclaim_status_reserved_for_pod{",
    "kube_resourceclaim_status_reserved_total{",
    "kube_resourceslice_device_capacity_memory_bytes{",
    "kube_resourceslice_device_capacity_multiprocessors{",
    "kube_resourceslice_device_capacity_decoders{",
    "kube_deviceclass_hourly_cost{",
)


def dra_lines(body: str) -> set[str]:
    """The sample lines of the original's seven families in an exposition."""
    return {line for line in body.splitlines() if line.startswith(ORIGINAL)}
