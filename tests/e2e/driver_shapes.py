"""Pools shaped as real DRA drivers publish them, as publish-slices descriptions.

Copied as data from the drivers' sources (they cannot be built here): the example driver
(kubernetes-sigs/dra-example-driver, ``internal/profiles/{gpu,cpu,net}``) with its ``gpu``
profile without and with ``GPU_PARTITIONS``, its ``cpu`` and ``net`` profiles (devices allowing
multiple allocations, capacity consumed by requests); and NVIDIA's GPU driver
(kubernetes-sigs/dra-driver-nvidia-gpu) in dynamic-MIG mode on an A100 80GB: one slice of
counter sets, one slice of devices per GPU, the full GPU consuming every counter of its set.
Each function gives one Node's resources; the pool is the Node's name, as the drivers name it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from copy import deepcopy
from typing import Any

GPU_MEMORY = 80  # Gi
GPU_COMPUTE = 100


def _uuid(*seed: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "/".join(seed)))


def _pool(node: str, *slices: dict[str, Any]) -> dict[str, Any]:
    return {"pools": {node: {"slices": list(slices)}}}


def _example_gpu(node: str, index: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "index": {"int": index},
            "uuid": {"string": f"gpu-{_uuid(node, str(index))}"},
            "model": {"string": "LATEST-GPU-MODEL"},
            "driverVersion": {"version": "1.0.0"},
        },
        "capacity": {
            "memory": {"value": f"{GPU_MEMORY}Gi"},
            "compute": {"value": str(GPU_COMPUTE)},
        },
    }


def example_gpu(node: str, count: int = 8) -> dict[str, Any]:
    """``gpu.example.com``, the default profile: one slice of whole GPUs."""
    return _pool(node, {"devices": [_example_gpu(node, index) for index in range(count)]})


def _partitioned(
    gpu: dict[str, Any], index: int, name: str, capacity: dict[str, Any], **attributes: Any
) -> dict[str, Any]:
    """Device *name* of partitionable *gpu* number *index*: of its counters, all it has."""
    return {
        "name": f"gpu-{index}-{name}",
        "attributes": {**gpu["attributes"], "partitionable": {"bool": True}, **attributes},
        "capacity": capacity,
        "consumesCounters": [{"counterSet": f"gpu-{index}-counters", "counters": capacity}],
    }


def example_gpu_partitions(node: str, count: int = 8, partitions: int = 2) -> dict[str, Any]:
    """``gpu.example.com`` with ``GPU_PARTITIONS``: counter sets, then partitions and fulls."""
    memory, compute = f"{GPU_MEMORY // partitions}Gi", str(GPU_COMPUTE // partitions)
    counter_sets = []
    devices = []
    for index in range(count):
        gpu = _example_gpu(node, index)
        whole = {"memory": {"value": f"{GPU_MEMORY}Gi"}, "compute": {"value": str(GPU_COMPUTE)}}
        counter_sets.append({"name": f"gpu-{index}-counters", "counters": whole})
        part = {"memory": {"value": memory}, "compute": {"value": compute}}
        for number in range(partitions):
            named = f"partition-{number}"
            devices.append(_partitioned(gpu, index, named, part, partition={"int": number}))
        devices.append(_partitioned(gpu, index, "full", whole, full={"bool": True}))
    return _pool(node, {"sharedCounters": counter_sets}, {"devices": devices})


def _shared(
    node: str, prefix: str, count: int, attributes: Callable[[int], Any], capacity: dict[str, Any]
) -> dict[str, Any]:
    """One slice of *count* devices PREFIX-N allowing multiple allocations, of *capacity* each."""
    devices = [
        {
            "name": f"{prefix}-{index}",
            "allowMultipleAllocations": True,
            "attributes": attributes(index),
            "capacity": deepcopy(capacity),
        }
        for index in range(count)
    ]
    return _pool(node, {"devices": devices})


def example_cpu(node: str, count: int = 8) -> dict[str, Any]:
    """``cpu.example.com``: NUMA nodes shared by capacity, the capacity name qualified."""
    return _shared(
        node,
        "numa",
        count,
        lambda index: {"numaNodeID": {"int": index}},
        {"cpu.example.com/cpu": {"value": "4"}},
    )


def example_net(node: str, count: int = 8) -> dict[str, Any]:
    """``net.example.com``: NICs shared by bandwidth and virtual functions."""
    bandwidth = {"default": "1G", "validRange": {"min": "100M", "max": "100G", "step": "1M"}}
    return _shared(
        node,
        "nic",
        count,
        lambda index: {
            "index": {"int": index},
            "uuid": {"string": f"nic-{_uuid(node, 'nic', str(index))}"},
            "model": {"string": "LATEST-NIC-MODEL"},
            "driverVersion": {"version": "1.0.0"},
        },
        {
            "vfs": {"value": "100", "requestPolicy": {"default": "1"}},
            "bandwidth": {"value": "100G", "requestPolicy": bandwidth},
        },
    )


MIG_PROFILES = {
    # profile: (GI profile id, placements, memory slices, multiprocessors, copy engines,
    #           decoders, jpeg engines, ofa engines, memory MiB) on an A100 80GB
    "1g.10gb": (19, range(7), 1, 14, 1, 0, 0, 0, 9728),
    "2g.20gb": (14, (0, 2, 4), 2, 28, 2, 1, 0, 0, 19968),
    "3g.40gb": (9, (0, 4), 4, 42, 3, 2, 0, 0, 40192),
    "4g.40gb": (5, (0,), 4, 56, 4, 2, 0, 0, 40192),
    "7g.80gb": (0, (0,), 8, 98, 7, 5, 1, 1, 80896),
}
A100: dict[str, Any] = {
    "productName": {"string": "NVIDIA A100 80GB PCIe"},
    "brand": {"string": "Nvidia"},
    "architecture": {"string": "Ampere"},
    "cudaComputeCapability": {"version": "8.0.0"},
    "driverVersion": {"version": "580.95.5"},
    "cudaDriverVersion": {"version": "13.0.0"},
}


def _mig_counters(
    slices: range, sms: int, copy: int, dec: int, jpeg: int, ofa: int, mib: int
) -> dict[str, Any]:
    counters = {
        "multiprocessors": sms,
        "copy-engines": copy,
        "decoders": dec,
        "encoders": 0,
        "jpeg-engines": jpeg,
        "ofa-engines": ofa,
    }
    every = {name: {"value": str(value)} for name, value in counters.items()}
    every["memory"] = {"value": f"{mib}Mi"}
    every.update({f"memory-slice-{index}": {"value": "1"} for index in slices})
    return every


def nvidia_dynamic_mig(node: str, gpus: int = 2) -> dict[str, Any]:
    """``gpu.nvidia.com`` in dynamic-MIG mode: G + 1 slices, MIG devices without a uuid."""
    counter_sets = []
    per_gpu = []
    for minor in range(gpus):
        counter_set = f"gpu-{minor}-counter-set"
        parent = f"GPU-{_uuid(node, 'gpu', str(minor))}"
        where: dict[str, Any] = {
            "resource.kubernetes.io/pciBusID": {"string": f"0000:{0x17 + minor:02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{0x16 + minor:02x}"},
        }
        every = _mig_counters(range(8), 98, 7, 5, 1, 1, GPU_MEMORY * 1024)
        counter_sets.append({"name": counter_set, "counters": every})
        devices: list[dict[str, Any]] = [
            {
                "name": f"gpu-{minor}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": parent},
                    **A100,
                    "addressingMode": {"string": "None"},
                    **where,
                },
                "capacity": {"memory": {"value": f"{GPU_MEMORY}Gi"}},
                "consumesCounters": [{"counterSet": counter_set, "counters": every}],
            }
        ]
        for profile, (
            gi,
            placements,
            width,
            sms,
            copy,
            dec,
            jpeg,
            ofa,
            mib,
        ) in MIG_PROFILES.items():
            for start in placements:
                memory_slices = range(start, start + width)
                capacity = {
                    "multiprocessors": {"value": str(sms)},
                    "copyEngines": {"value": str(copy)},
                    "decoders": {"value": str(dec)},
                    "encoders": {"value": "0"},
                    "jpegEngines": {"value": str(jpeg)},
                    "ofaEngines": {"value": str(ofa)},
                    "memory": {"value": f"{mib}Mi"},
                    **{f"memorySlice{index}": {"value": "1"} for index in memory_slices},
                }
                needs = _mig_counters(memory_slices, sms, copy, dec, jpeg, ofa, mib)
                attributes: dict[str, Any] = {
                    "type": {"string": "mig"},
                    "parentUUID": {"string": parent},
                    "profile": {"string": profile},
                }
                devices.append(
                    {
                        "name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{gi}-{start}",
                        "attributes": {**attributes, **A100, **where},
                        "capacity": capacity,
                        "consumesCounters": [{"counterSet": counter_set, "counters": needs}],
                    }
                )
        per_gpu.append({"devices": devices})
    return _pool(node, {"sharedCounters": counter_sets}, *per_gpu)
