"""Claims and pods stuck on their devices, written to a real API server as each writer writes them.

No scheduler runs on the session's control plane: the allocations are written as
kube-scheduler 1.37 writes them (binding conditions copied from the slice, the pod reserved
before it is bound), device conditions as drivers write them, and a bound pod's status as a
kubelet writes it.  Everything is of the namespace ``stuck`` and the drivers below, so these
samples can be told from the other tests'.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.controlplane import Kube
from tests.e2e.simworld import pod
from tests.objects import resource_slice

V1 = "/apis/resource.k8s.io/v1"
NAMESPACE = "stuck"
NODE = "stuck-node"
PORT_DRIVER = "port.e2e.example"
"""Its ports bind to the node once it has attached them (binding conditions)."""
NIC_DRIVER = "nic.e2e.example"
"""It takes a NIC out of its slice while the NIC is allocated."""
SINCE = "2026-12-01T00:00:00Z"
"""When the allocations were made, and since when the unprepared pod waits."""


def port(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "bindsToNode": True,
        "bindingConditions": ["attached"],
        "bindingFailureConditions": ["attach-failed"],
    }


SLICES = [
    resource_slice(
        "stuck-ports", [port("port-0"), port("port-1")], PORT_DRIVER, NODE, nodeName=NODE
    ),
    resource_slice(
        "stuck-nics", [{"name": "nic-1"}, {"name": "nic-2"}], NIC_DRIVER, NODE, nodeName=NODE
    ),
]
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "stuck-nic"},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{NIC_DRIVER}'"}}]},
}


def result(driver: str, device: str, binds: bool = False) -> dict[str, Any]:
    made: dict[str, Any] = {"request": "dev", "driver": driver, "pool": NODE, "device": device}
    if binds:
        made.update(bindingConditions=["attached"], bindingFailureConditions=["attach-failed"])
    return made


def conditions(device: str, **statuses: str) -> list[dict[str, Any]]:
    """A port's status as its driver writes it."""
    return [
        {
            "driver": PORT_DRIVER,
            "pool": NODE,
            "device": device,
            "conditions": [
                {
                    "type": kind,
                    "status": status,
                    "reason": "Failed" if kind == "attach-failed" else "Attaching",
                    "message": "",
                    "lastTransitionTime": SINCE,
                }
                for kind, status in statuses.items()
            ],
        }
    ]


# claim -> (its one result, its status.devices, the pod it is reserved for)
CLAIMS: dict[str, tuple[dict[str, Any] | None, list[dict[str, Any]], str | None]] = {
    "attaching": (
        result(PORT_DRIVER, "port-0", binds=True),
        conditions("port-0", attached="False"),
        "attaching",
    ),
    "failed": (
        result(PORT_DRIVER, "port-1", binds=True),
        conditions("port-1", attached="False", **{"attach-failed": "True"}),
        None,
    ),
    "gone": (result(PORT_DRIVER, "port-9"), [], None),
    "lent": (result(NIC_DRIVER, "nic-0"), [], None),
    "unprepared": (result(NIC_DRIVER, "nic-1"), [], "unprepared"),
    "unheard": (None, [], None),
}
PODS: dict[str, dict[str, Any]] = {
    "attaching": {},
    "unprepared": {"nodeName": NODE},
    "unheard": {"schedulerName": "no-such-scheduler"},
}
"""Each pod's spec besides its one claim, named after it."""


def kubelet_waiting(pod: dict[str, Any]) -> dict[str, Any]:
    """A bound pod's status as the kubelet writes it while the driver has not prepared."""
    pod["status"] = {
        "phase": "Pending",
        "hostIP": "10.0.0.9",
        "startTime": SINCE,
        "conditions": [
            {
                "type": "PodReadyToStartContainers",
                "status": "False",
                "reason": "PodSandboxNotReady",
                "lastTransitionTime": SINCE,
            },
            {"type": "Initialized", "status": "True", "lastTransitionTime": SINCE},
            {"type": "Ready", "status": "False", "lastTransitionTime": SINCE},
            {"type": "ContainersReady", "status": "False", "lastTransitionTime": SINCE},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": SINCE},
        ],
        "containerStatuses": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    }
    return pod


def create_all(kube: Kube) -> None:
    """Create every object: slices, a class, pods, then the claims and what was written of them."""
    kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    for made in SLICES:
        kube.create(f"{V1}/resourceslices", made)
    kube.create(f"{V1}/deviceclasses", CLASS)
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    uids = {}
    for name, spec in PODS.items():
        wanted = pod(name, {"resourceClaimName": name})
        wanted["spec"].update(spec)
        made = kube.create(pods, wanted)
        uids[name] = made["metadata"]["uid"]
        if spec.get("nodeName"):
            kube.put(f"{pods}/{name}/status", kubelet_waiting(made))
    claims = f"{V1}/namespaces/{NAMESPACE}/resourceclaims"
    for name, (allocated, devices, reserved) in CLAIMS.items():
        request = {"name": "dev", "exactly": {"deviceClassName": "stuck-nic"}}
        made = kube.create(
            claims,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {"devices": {"requests": [request]}},
            },
        )
        if allocated is None:
            continue
        made["status"] = {
            "allocation": {"devices": {"results": [allocated]}, "allocationTimestamp": SINCE},
            "devices": devices,
        }
        if reserved is not None:
            made["status"]["reservedFor"] = [
                {"resource": "pods", "name": reserved, "uid": uids[reserved]}
            ]
        kube.put(f"{claims}/{name}/status", made)
