"""Kubernetes' own DRA test driver as the node's kubelet plugin, and claims of its devices.

``dra-test-driver kubelet-plugin`` (k8s.io/kubernetes/test/e2e/dra/test-driver, built by
scripts/build-node.sh) registers with the kubelet through its plugin registry, publishes one
pool named after the node with :data:`DEVICES` devices (``device-00``...) through the
kubelet-plugin library's ResourceSlice controller, and prepares claims by writing CDI specs that
containerd applies to the containers: a claim's opaque parameters become their environment.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import attrs

from tests.e2e.controlplane import APIError, Kube
from tests.e2e.harness import wait_until
from tests.node import host
from tests.node.cluster import NODE, PAUSE, Node

NAME = "test-driver.cdi.k8s.io"
"""The driver's name, its slices' ``spec.driver``."""
DEVICES = 4
CLASS = "node-test-driver"
"""The DeviceClass selecting the driver's devices."""
RESOURCE = "/apis/resource.k8s.io/v1"


@attrs.define
class Driver:
    """The driver's process, started and stopped at will, and what it publishes."""

    node: Node
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it; wait until the kubelet has registered it and its pool is published.

        Registered: the kubelet has told this process so (its gRPC calls are logged from
        ``-v=6``); the slices of a driver stopped a moment ago may still be there, and the
        kubelet may still hold that driver's endpoint.
        """
        kubelet = host.ROOT / "kubelet"
        (kubelet / "plugins" / NAME).mkdir(parents=True, exist_ok=True)
        path = host.ROOT / "logs" / "dra-test-driver.log"
        begins = path.stat().st_size if path.exists() else 0
        with path.open("ab") as log:
            self.process = host.spawn(
                "dra-test-driver",
                [
                    str(self.node.binaries / "dra-test-driver"),
                    f"--kubeconfig={self.node.kubeconfig}",
                    "kubelet-plugin",
                    f"--node-name={NODE}",
                    f"--plugin-registration-path={kubelet / 'plugins_registry'}",
                    f"--datadir={kubelet / 'plugins'}",
                    f"--cdi-dir={host.ROOT / 'cdi'}",
                    f"--num-devices={DEVICES}",
                    "-v=6",
                ],
                log,
            )

        def registered() -> bool:
            assert self.process is not None and self.process.poll() is None, self.node.log(
                "dra-test-driver"
            )
            with path.open("rb") as written:
                written.seek(begins)
                calls = [
                    line
                    for line in written.read().splitlines()
                    if b"/pluginregistration.Registration/NotifyRegistrationStatus" in line
                ]
            return any(b"handling request succeeded" in line for line in calls)

        wait_until(registered, 60, "the driver registered by the kubelet")
        wait_until(lambda: len(self.devices()) == DEVICES, 60, "the driver's pool published")

    def stop(self) -> None:
        """Stop it as a DaemonSet's pod is stopped (SIGTERM): it unregisters, the slices stay."""
        if self.process is not None:
            host.stop(self.process)
            self.process = None

    def slices(self) -> list[dict[str, Any]]:
        """The driver's ResourceSlices as the API holds them."""
        items: list[dict[str, Any]] = self.node.kube.get(f"{RESOURCE}/resourceslices")["items"]
        return [s for s in items if s["spec"]["driver"] == NAME]

    def devices(self) -> list[str]:
        return sorted(d["name"] for s in self.slices() for d in s["spec"].get("devices", []))


def ensure_class(kube: Kube) -> None:
    """The DeviceClass of the driver's devices, unless it exists."""
    try:
        kube.create(
            f"{RESOURCE}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": CLASS},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NAME}"'}}]},
            },
        )
    except APIError as error:
        if error.code != 409:
            raise


def claim(name: str, count: int = 1, parameters: dict[str, str] | None = None) -> dict[str, Any]:
    """A ResourceClaim for *count* of the driver's devices, with opaque *parameters*.

    The driver turns the parameters into the environment of the containers using the claim.
    """
    request: dict[str, Any] = {
        "name": "device",
        "exactly": {"deviceClassName": CLASS, "count": count},
    }
    spec: dict[str, Any] = {"devices": {"requests": [request]}}
    if parameters:
        spec["devices"]["config"] = [
            {"opaque": {"driver": NAME, "parameters": parameters}, "requests": ["device"]}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def pod(name: str, claim_name: str) -> dict[str, Any]:
    """A pod of one idle container using the claim *claim_name*."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "resourceClaims": [{"name": "device", "resourceClaimName": claim_name}],
            "containers": [
                {
                    "name": "idle",
                    "image": PAUSE,
                    "imagePullPolicy": "Never",
                    "resources": {"claims": [{"name": "device"}]},
                }
            ],
        },
    }


def cdi_specs() -> list[Path]:
    """The CDI specs the driver has written (one per prepared claim)."""
    return sorted((host.ROOT / "cdi").glob("*.json"))
