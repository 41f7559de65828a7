"""A simulated DRA cluster: the real kube-scheduler and kube-controller-manager, no kubelet.

Its own etcd and kube-apiserver (tests/e2e/controlplane.py), Nodes made through the API.

The scheduler allocates claims with the structured allocator it is built with, the controller
manager makes claims from templates, deallocates them, evicts for NoExecute taints and (its
garbage collector) deletes generated claims.  Both run with their production identities
(``system:kube-scheduler``, ``system:kube-controller-manager``) and the bootstrap RBAC.  Without
a kubelet nothing confirms a graceful delete, so pods are deleted with a grace period of 0.
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import attrs
import yaml

from tests import tools
from tests.e2e.controlplane import APIError, ControlPlane, Kube, start
from tests.e2e.harness import write_kubeconfig
from tests.processes import free_port

SCHEDULER = ("sim-scheduler-token", "system:kube-scheduler")
CONTROLLER_MANAGER = ("sim-controller-manager-token", "system:kube-controller-manager")
CONTROLLERS = (
    "resourceclaim-controller,device-taint-eviction-controller,garbage-collector-controller"
)
READY_TIMEOUT = 60.0


@attrs.define
class Simulated:
    """The control plane, the two components, and the means to arrange a cluster."""

    plane: ControlPlane
    components: list[subprocess.Popen[bytes]]
    ports: dict[str, int] = attrs.field(factory=dict)
    """The secure port of each component (``kube-scheduler``, ``kube-controller-manager``)."""

    @property
    def kube(self) -> Kube:
        return self.plane.kube

    def add_namespace(self, name: str) -> None:
        """The Namespace *name*, unless it exists."""
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        ensure(self.kube, "/api/v1/namespaces", namespace)

    def add_node(self, name: str, cpu: str = "8") -> None:
        """A Ready Node, without the not-ready taint the admission plugin puts on new Nodes."""
        capacity = {"cpu": cpu, "memory": "32Gi", "pods": "110"}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "simulated node",
                        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            },
        }
        made = self.kube.create("/api/v1/nodes", node)
        made["spec"]["taints"] = []
        self.kube.put(f"/api/v1/nodes/{name}", made)

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod at once: no kubelet would confirm a graceful delete."""
        self.kube.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
        )

    def delete_pods(self, namespace: str, *names: str) -> None:
        """Delete pods at once; those already gone are no matter."""
        for name in names:
            try:
                self.delete_pod(namespace, name)
            except APIError as error:
                if error.code != 404:
                    raise

    def metrics(self, component: str) -> str:
        """The exposition at ``/metrics`` of *component*, or of ``kube-apiserver``.

        Asked with the admin's token, which each component reviews with the API server
        (delegated authentication and authorization), as Prometheus would ask with its own.
        """
        if component == "kube-apiserver":
            text: str = self.kube.get("/metrics")
            return text
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.ports[component]}/metrics",
            headers={"Authorization": f"Bearer {self.kube.token}"},
        )
        with urllib.request.urlopen(request, context=_insecure(), timeout=30) as answer:
            return str(answer.read().decode())

    def stop(self) -> None:
        for process in self.components:
            process.terminate()
        for process in self.components:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.plane.stop()


def _component(
    binary: Path, directory: Path, name: str, args: list[str]
) -> subprocess.Popen[bytes]:
    with (directory / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            [str(binary), *args], stdout=log, stderr=subprocess.STDOUT, cwd=directory
        )


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the component's own self-signed serving certificate
    return context


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, context=_insecure(), timeout=5) as answer:
            return bool(answer.read() == b"ok")
    except (urllib.error.URLError, OSError):
        return False


def start_simulated(
    directory: Path,
    apiserver_args: tuple[str, ...] = (),
    profile: dict[str, Any] | None = None,
    pods_reach: str | None = None,
    controllers: str = CONTROLLERS,
) -> Simulated:
    """Start the control plane, kube-scheduler and kube-controller-manager; wait until ready.

    *apiserver_args* go to kube-apiserver besides its usual ones; *profile*, if given, is the
    scheduler's one profile in a KubeSchedulerConfiguration (its plugins' arguments).
    *pods_reach* is the address pods reach it at, when a node runs them (see
    :func:`~tests.e2e.controlplane.start`): the controller manager then publishes the cluster's
    CA in every namespace (``kube-root-ca.crt``, which the pods' projected ServiceAccount volumes
    carry). *controllers* are the controller manager's.
    """
    plane = start(
        directory, apiserver_args, identities=(SCHEDULER, CONTROLLER_MANAGER), pods_reach=pods_reach
    )
    binaries = tools.scheduler_plane()
    scheduler_config = write_kubeconfig(
        directory / "scheduler.kubeconfig", plane.kube, SCHEDULER[0]
    )
    manager_config = write_kubeconfig(
        directory / "controller-manager.kubeconfig", plane.kube, CONTROLLER_MANAGER[0]
    )
    scheduler_port, manager_port = free_port(), free_port()

    def common(config: Path, port: int) -> list[str]:
        return [
            f"--kubeconfig={config}",
            f"--authentication-kubeconfig={config}",
            f"--authorization-kubeconfig={config}",
            # No client CA is configured, so the lookup of its ConfigMap would fail in a loop.
            "--authentication-skip-lookup=true",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            "--profiling=false",
        ]

    scheduler_args = common(scheduler_config, scheduler_port)
    if profile is not None:
        configured = directory / "scheduler.yaml"
        configured.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kubescheduler.config.k8s.io/v1",
                    "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(scheduler_config)},
                    "profiles": [{"schedulerName": "default-scheduler", **profile}],
                }
            )
        )
        scheduler_args.append(f"--config={configured}")
    components = [
        _component(binaries / "kube-scheduler", directory, "kube-scheduler", scheduler_args),
        _component(
            binaries / "kube-controller-manager",
            directory,
            "kube-controller-manager",
            [
                *common(manager_config, manager_port),
                "--use-service-account-credentials=true",
                f"--controllers={controllers}",
                *((f"--root-ca-file={directory / 'ca.crt'}",) if pods_reach else ()),
            ],
        ),
    ]
    simulated = Simulated(
        plane,
        components,
        {"kube-scheduler": scheduler_port, "kube-controller-manager": manager_port},
    )
    deadline = time.monotonic() + READY_TIMEOUT
    checks = [
        f"https://127.0.0.1:{scheduler_port}/readyz",
        f"https://127.0.0.1:{manager_port}/healthz",
    ]
    while not all(_ready(url) for url in checks):
        for process in components:
            if process.poll() is not None:
                simulated.stop()
                raise RuntimeError(f"{process.args!r} exited; see {directory}")
        if time.monotonic() > deadline:
            simulated.stop()
            raise RuntimeError(f"the scheduler or controller manager not ready; see {directory}")
        time.sleep(0.2)
    return simulated


def ensure(kube: Kube, path: str, obj: dict[str, Any]) -> Any:
    """Create *obj* unless it exists."""
    try:
        return kube.create(path, obj)
    except APIError as error:
        if error.code != 409:
            raise
        return None
