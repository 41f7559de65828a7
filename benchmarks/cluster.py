"""A synthetic GPU cluster shaped like what the NVIDIA DRA driver publishes.

N nodes with 8 devices each: three nodes in four carry full GPUs (A100 80GB), every fourth is
partitioned into MIG devices (eight 1g.10gb slices of its GPUs). Half of the devices are
allocated, one device a claim, each claim reserved by a pod and labelled as the template it was
made from would label it (a team, a cost center). A few DeviceClasses, with costs.

The ``h100`` shape (:data:`SHAPES`) is another driver's view of another fleet: every node eight
full H100 GPUs, each with three capacities, and claims spread over 50 namespaces.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

DEVICES_PER_NODE = 8
DRIVER = "gpu.nvidia.com"
COMMON = {
    "productName": {"string": "NVIDIA A100 80GB PCIe"},
    "brand": {"string": "Nvidia"},
    "architecture": {"string": "Ampere"},
    "cudaComputeCapability": {"version": "8.0.0"},
    "driverVersion": {"version": "580.95.5"},
    "cudaDriverVersion": {"version": "13.0.0"},
}


def _uuid(prefix: str, *parts: int) -> str:
    return f"{prefix}-{uuid.UUID(int=hash(parts) & (2**128 - 1))}"


def node_name(index: int) -> str:
    """The name of node *index*."""
    return f"gpu-node-{index:05d}"


def devices(node: int) -> list[dict[str, Any]]:
    """The devices one node publishes."""
    found = []
    for index in range(DEVICES_PER_NODE):
        bus = f"0000:{0x17 + index * 0x10:02x}:00.0"
        if node % 4 == 3:
            parent = index // 4
            start = (index % 4) * 2
            found.append(
                {
                    "name": f"gpu-{parent}-mig-1g10gb-19-{start}",
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {"string": _uuid("MIG", node, index)},
                        "parentUUID": {"string": _uuid("GPU", node, parent)},
                        "profile": {"string": "1g.10gb"},
                        **COMMON,
                        "resource.kubernetes.io/pciBusID": {"string": bus},
                    },
                    "capacity": {
                        "multiprocessors": {"value": "14"},
                        "copyEngines": {"value": "1"},
                        "decoders": {"value": "0"},
                        "encoders": {"value": "0"},
                        "jpegEngines": {"value": "0"},
                        "ofaEngines": {"value": "0"},
                        "memory": {"value": "9728Mi"},
                        f"memorySlice{start}": {"value": "1"},
                    },
                }
            )
        else:
            found.append(
                {
                    "name": f"gpu-{index}",
                    "attributes": {
                        "type": {"string": "gpu"},
                        "uuid": {"string": _uuid("GPU", node, index)},
                        **COMMON,
                        "addressingMode": {"string": "None"},
                        "resource.kubernetes.io/pciBusID": {"string": bus},
                        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index:02x}"},
                    },
                    "capacity": {"memory": {"value": "80Gi"}},
                }
            )
    return found


H100 = {
    "productName": {"string": "NVIDIA H100 80GB HBM3"},
    "brand": {"string": "Nvidia"},
    "architecture": {"string": "Hopper"},
    "cudaComputeCapability": {"version": "9.0.0"},
    "driverVersion": {"version": "580.95.5"},
    "cudaDriverVersion": {"version": "13.0.0"},
}


def h100_devices(node: int) -> list[dict[str, Any]]:
    """One node's eight H100 GPUs: nine attributes and three capacities each."""
    return [
        {
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": _uuid("GPU", node, index)},
                **H100,
                "resource.kubernetes.io/pciBusID": {
                    "string": f"0000:{0x18 + index * 0x10:02x}:00.0"
                },
            },
            "capacity": {
                "memory": {"value": "80Gi"},
                "multiprocessors": {"value": "132"},
                "decoders": {"value": "7"},
            },
        }
        for index in range(DEVICES_PER_NODE)
    ]


CLASSES = (
    ("gpu.nvidia.com", "type", "gpu", "2.50"),
    ("mig.nvidia.com", "type", "mig", "0.45"),
    ("vfio.gpu.nvidia.com", "type", "vfio", None),
)
"""The NVIDIA chart's classes: (name, attribute, value selected, hourly cost)."""
H100_CLASSES = (
    ("gpu.nvidia.com", "type", "gpu", "2.50"),
    ("h100.nvidia.com", "productName", H100["productName"]["string"], "3.90"),
)
"""A generic class and a per-model one, both priced, both selecting every H100."""


class Shape(NamedTuple):
    """What a node publishes, over how many namespaces its claims are spread, the classes."""

    devices: Callable[[int], list[dict[str, Any]]]
    namespaces: int
    classes: tuple[tuple[str, str, str, str | None], ...]
    dated: bool = True
    """Whether claims have their ``metadata.creationTimestamp`` (each one without is logged)."""


SHAPES = {
    "mixed": Shape(devices, 16, CLASSES),
    "h100": Shape(h100_devices, 50, H100_CLASSES),
    "undated": Shape(devices, 16, CLASSES, dated=False),
}
"""The clusters the fake API can serve, by name: the mixed A100 and MIG fleet is the default;
``undated``, that fleet with claims an odd API server or a restore left without a creation
time."""


def resource_slices(nodes: int, shape: Shape = SHAPES["mixed"]) -> list[dict[str, Any]]:
    """One slice a node, as the driver writes them."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"{node_name(n)}-gpu.nvidia.com-x7k2p",
                "generateName": f"{node_name(n)}-gpu.nvidia.com-",
                "uid": str(uuid.UUID(int=n + 1)),
                "resourceVersion": str(1000 + n),
                "creationTimestamp": "2026-11-20T09:14:03Z",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node_name(n),
                        "uid": str(uuid.UUID(int=10**9 + n)),
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "driver": DRIVER,
                "nodeName": node_name(n),
                "pool": {"name": node_name(n), "generation": 1, "resourceSliceCount": 1},
                "devices": shape.devices(n),
            },
        }
        for n in range(nodes)
    ]


def resource_claims(nodes: int, shape: Shape = SHAPES["mixed"]) -> list[dict[str, Any]]:
    """A claim for every other device, allocated and reserved by a pod (undated if asked)."""
    claims: list[dict[str, Any]] = []
    for n in range(nodes):
        for device in shape.devices(n)[::2]:
            claims.append(
                gpu_claim(
                    f"job-{n:05d}-{device['name']}",
                    f"team-{n % shape.namespaces:02d}",
                    len(claims),
                    n,
                    device["name"],
                    "reserved",
                )
            )
            if not shape.dated:
                del claims[-1]["metadata"]["creationTimestamp"]
    return claims


def gpu_claim(
    name: str, namespace: str, number: int, node: int, device: str, state: str
) -> dict[str, Any]:
    """Claim *number* for one GPU, made from a pod's template on *node*, in *state*.

    ``pending`` (no status), ``allocated`` (*device* of *node*'s pool) or ``reserved`` (and
    reserved by its pod): the states a claim goes through as its pod is scheduled.
    """
    made: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.UUID(int=2 * 10**9 + number)),
            "resourceVersion": str(5000 + number),
            "creationTimestamp": "2026-11-28T16:02:11Z",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
            "labels": {
                "team": f"team-{node % 16:02d}",
                "cost-center": f"cc-{node % 5}",
                "app.kubernetes.io/name": "trainer",
            },
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.nvidia.com",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
    }
    if state == "pending":
        return made
    made["status"] = {
        "allocation": {
            "allocationTimestamp": "2026-11-28T16:02:14Z",
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": node_name(node), "device": device}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [node_name(node)]}
                        ]
                    }
                ]
            },
        }
    }
    if state == "reserved":
        made["status"]["reservedFor"] = [
            {
                "resource": "pods",
                "name": f"{name}-pod",
                "uid": str(uuid.UUID(int=3 * 10**9 + number)),
            }
        ]
    return made


def device_classes(
    classes: tuple[tuple[str, str, str, str | None], ...] = CLASSES,
) -> list[dict[str, Any]]:
    """DeviceClasses selecting the driver's devices by one attribute, some with an hourly cost."""
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {
                "name": name,
                "resourceVersion": "1",
                "creationTimestamp": "2026-11-01T08:00:00Z",
                **({"annotations": {"hourly-cost": cost}} if cost else {}),
            },
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.driver == '{DRIVER}' && "
                            f"device.attributes['{DRIVER}'].{attribute} == '{value}'"
                        }
                    }
                ],
                **({"extendedResourceName": "nvidia.com/gpu"} if name == "gpu.nvidia.com" else {}),
            },
        }
        for name, attribute, value, cost in classes
    ]


PENDING = (
    ("class-not-found", {"deviceClassName": "a100.nvidia.com"}),
    (
        "selector-error",
        {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [
                {"cel": {"expression": f"device.attributes['{DRIVER}'].driverVersion > 570"}}
            ],
        },
    ),
    ("no-matching-device", {"deviceClassName": "vfio.gpu.nvidia.com"}),
    (
        "in-use",
        {
            "deviceClassName": "gpu.nvidia.com",
            "selectors": [
                {
                    "cel": {
                        "expression": "device.attributes['resource.kubernetes.io'].pciBusID == "
                        "'0000:17:00.0'"
                    }
                }
            ],
        },
    ),
    ("insufficient", {"deviceClassName": "gpu.nvidia.com", "count": 5}),
    ("feasible", {"deviceClassName": "gpu.nvidia.com", "count": 1}),
)
"""Pending claims' requests, one a reason the synthetic cluster can give (it has no tainted
device and no unusable pool): a wrong class, a selector comparing a version with a number, a
class selecting nothing, every device on the first PCI bus (all allocated), five GPUs on one
node (four are free at most), and one GPU (its pod waits for something else)."""


def pending_claims(count: int) -> list[dict[str, Any]]:
    """*count* pending claims, spread over :data:`PENDING` in turn."""
    claims = []
    for index in range(count):
        reason, exactly = PENDING[index % len(PENDING)]
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": f"pending-{reason}-{index:05d}",
                    "namespace": f"team-{index % 16:02d}",
                    "uid": str(uuid.UUID(int=4 * 10**9 + index)),
                    "resourceVersion": str(10**5 + index),
                    "creationTimestamp": "2026-11-28T16:02:11Z",
                },
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": dict(exactly)}]}},
            }
        )
    return claims


PODS_PER_DEVICE = 50 / 64
"""Pods per device: 50,000 at 64,000 devices."""
MATTERING = 0.4
"""Of them, those that use devices: 20,000 at 64,000 devices."""


def _pod(name: str, namespace: str, index: int, spec: dict[str, Any], **status: Any) -> Any:
    """A pod with what a real one carries beside its devices: labels, env, volumes, status."""
    labels = {"app.kubernetes.io/name": name.rsplit("-", 1)[0], "pod-template-hash": "7d9c8b6f5"}
    container = {
        "name": "main",
        "image": "registry.example.com/team/app:1.24.3",
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "env": [{"name": f"SETTING_{i}", "value": f"value-{i}"} for i in range(6)],
        "volumeMounts": [
            {
                "name": "kube-api-access",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
        **spec.pop("container", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.UUID(int=5 * 10**9 + index)),
            "resourceVersion": str(10**6 - 10**5 + index),
            "creationTimestamp": "2026-11-28T16:02:11Z",
            "labels": labels,
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-28T16:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{labels['app.kubernetes.io/name']}-7d9c8b6f5",
                    "uid": str(uuid.UUID(int=6 * 10**9 + index)),
                    "controller": True,
                }
            ],
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-11-28T16:02:11Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        f"f:{field}": {".": {}, **{f"f:{k}": {} for k in ("a", "b", "c", "d")}}
                        for field in ("metadata", "spec", "status")
                    },
                }
                for manager in ("kube-controller-manager", "kubelet")
            ],
        },
        "spec": {
            "containers": [container],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}],
            "serviceAccountName": "default",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}],
            **spec,
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": "10.0.3.17",
            "podIP": f"10.244.{index // 250 % 250}.{index % 250}",
            "startTime": "2026-11-28T16:02:12Z",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": "2026-11-28T16:02:14Z"}
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            **status,
        },
    }


def pods(nodes: int) -> list[dict[str, Any]]:
    """The pods of a cluster of *nodes* nodes, most of them using no device.

    Of those that do, four fifths run with a claim (their device's health reported) and a fifth
    wait for ``nvidia.com/gpu``, served by the gpu.nvidia.com class.
    """
    count = round(nodes * DEVICES_PER_NODE * PODS_PER_DEVICE)
    using = round(count * MATTERING)
    claims = resource_claims(nodes)
    made: list[dict[str, Any]] = []
    for index in range(count):
        namespace = f"team-{index % 16:02d}"
        if index < using * 4 // 5 and index < len(claims):
            claim = claims[index]
            result = claim["status"]["allocation"]["devices"]["results"][0]
            device = f"{result['driver']}/{result['pool']}/{result['device']}"
            made.append(
                _pod(
                    claim["status"]["reservedFor"][0]["name"],
                    claim["metadata"]["namespace"],
                    index,
                    {
                        "nodeName": result["pool"],
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "job"}],
                        "container": {"resources": {"claims": [{"name": "gpu"}]}},
                    },
                    resourceClaimStatuses=[
                        {"name": "gpu", "resourceClaimName": claim["metadata"]["name"]}
                    ],
                    containerStatuses=[
                        {
                            "name": "main",
                            "ready": True,
                            "allocatedResourcesStatus": [
                                {
                                    "name": "claim:gpu",
                                    "resources": [{"resourceID": device, "health": "Healthy"}],
                                }
                            ],
                        }
                    ],
                )
            )
        elif index < using:
            made.append(
                _pod(
                    f"waiting-{index:05d}",
                    namespace,
                    index,
                    {"container": {"resources": {"limits": {"nvidia.com/gpu": "1"}}}},
                    phase="Pending",
                    conditions=[
                        {
                            "type": "PodScheduled",
                            "status": "False",
                            "reason": "Unschedulable",
                            "message": "0/8000 nodes are available: 8000 cannot allocate all "
                            "claims.",
                        }
                    ],
                )
            )
        else:
            made.append(
                _pod(
                    f"web-{index:05d}",
                    namespace,
                    index,
                    {"nodeName": node_name(index % nodes)},
                    containerStatuses=[{"name": "main", "ready": True, "restartCount": 0}],
                )
            )
    return made


NODES_PER_CLIQUE = 18
"""Nodes sharing one NVLink domain (a GB200 NVL72 rack), as their clique label says."""


def node_objects(nodes: int) -> list[dict[str, Any]]:
    """The Nodes, as kubectl shows them: labels, capacity, addresses, conditions, images.

    One in a hundred is cordoned and one in two hundred not ready.  A real Node carries a few
    kilobytes the exporter does not read (its images above all): they are decoded past.
    """
    made = []
    for index in range(nodes):
        name = node_name(index)
        conditions = [
            {"type": kind, "status": "False", "reason": f"No{kind}", "message": "fine"}
            for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
        ]
        ready = "False" if index % 200 == 199 else "True"
        conditions.append({"type": "Ready", "status": ready, "reason": "KubeletReady"})
        made.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": _uuid("node", index),
                    "resourceVersion": str(3000 + index),
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "node.kubernetes.io/instance-type": "gpu-8x",
                        "topology.kubernetes.io/zone": f"zone-{index % 3}",
                        "nvidia.com/gpu.present": "true",
                        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                        "nvidia.com/gpu.clique": f"clique-{index // NODES_PER_CLIQUE}",
                    },
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                },
                "spec": {"podCIDR": f"10.{index // 256}.{index % 256}.0/24"}
                | ({"unschedulable": True} if index % 100 == 99 else {}),
                "status": {
                    "capacity": {"cpu": "96", "memory": "2Ti", "pods": "110"},
                    "allocatable": {"cpu": "95", "memory": "2000Gi", "pods": "110"},
                    "conditions": conditions,
                    "addresses": [{"type": "InternalIP", "address": f"10.1.{index % 256}.1"}],
                    "images": [
                        {"names": [f"registry.example/team/image-{i}:v1.{i}"], "sizeBytes": 10**9}
                        for i in range(20)
                    ],
                },
            }
        )
    return made


def cluster(
    nodes: int,
    pending: int = 0,
    with_pods: bool = False,
    renewed: int = 0,
    with_nodes: bool = False,
    shape: str = "mixed",
    claims: bool = True,
) -> dict[str, list[dict[str, Any]]]:
    """The lists of a cluster of *nodes* nodes, *pending* pending claims more, and what is asked.

    Its pods *with_pods*, its Nodes *with_nodes*; *renewed* (from 1) makes every object new
    (see :func:`renew`); *shape* names one of :data:`SHAPES`; without *claims*, no claim is
    allocated yet (a cluster before its jobs start).
    """
    made = SHAPES[shape]
    lists = {
        "resourceclaims": (resource_claims(nodes, made) if claims else [])
        + pending_claims(pending),
        "resourceslices": resource_slices(nodes, made),
        "deviceclasses": device_classes(made.classes),
    }
    if with_pods:
        lists["pods"] = pods(nodes)
    if with_nodes:
        lists["nodes"] = node_objects(nodes)
    if renewed:
        renew(lists, renewed)
    return lists


def renew(lists: dict[str, list[dict[str, Any]]], turn: int) -> None:
    """Make every object of *lists* new, as on turn *turn* of a cluster replaced whole.

    No object carries a ``resourceVersion`` (an exporter can tell nothing unchanged by it), each
    has a uid of the turn, and each device a UUID and a PCI bus id of its own: devices no longer
    read alike, as after every node was replaced.
    """
    for items in lists.values():
        for item in items:
            metadata = item["metadata"]
            metadata.pop("resourceVersion", None)
            metadata["uid"] = str(uuid.UUID(int=hash((turn, metadata["name"])) & (2**128 - 1)))
    for number, made in enumerate(lists["resourceslices"]):
        for place, device in enumerate(made["spec"]["devices"]):
            attributes = device["attributes"]
            kind = "MIG" if "parentUUID" in attributes else "GPU"
            attributes["uuid"] = {"string": _uuid(kind, turn, number, place)}
            bus = attributes["resource.kubernetes.io/pciBusID"]["string"]
            attributes["resource.kubernetes.io/pciBusID"] = {
                "string": f"{number % 2**16:04x}{bus[4:]}"
            }
