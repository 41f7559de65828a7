"""What the end-to-end tests share besides fixtures.

Waiting for a condition, scraping, tokens and kubeconfigs for the chart's ServiceAccounts, and
the exporter run as a child process against the real control plane.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests import kubeconfigs
from tests.e2e.controlplane import APIError, Kube
from tests.processes import free_port
from tests.processes import start as start_exporter

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None], limit: float = 30.0, what: str = "condition"
) -> T:
    """Poll *condition* until it returns something truthy, at most *limit* seconds."""
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not met within {limit:g}s"
        time.sleep(0.2)


def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    """GET the exporter; (code, body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def ensure_namespace(kube: Kube, name: str) -> None:
    try:
        kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except APIError as error:
        if error.code != 409:
            raise


CHART_NAMESPACE = "dra-monitoring"
RELEASE_OBJECTS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


RESOURCES = ["resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules"]
"""Every resource, DeviceTaintRules included: what the tests of the newer families list."""


def mint_token(kube: Kube, service_account: str, secret: str | None = None) -> str:
    """A token for the chart's ServiceAccount by TokenRequest, bound to *secret* if given."""
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if secret is not None:
        bound = kube.create(
            f"/api/v1/namespaces/{CHART_NAMESPACE}/secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret}},
        )
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": secret,
            "uid": bound["metadata"]["uid"],
        }
    answer = kube.create(
        f"/api/v1/namespaces/{CHART_NAMESPACE}/serviceaccounts/{service_account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(answer["status"]["token"])


def bound_account(kube: Kube, name: str, namespace: str, rules: list[dict[str, Any]]) -> str:
    """ServiceAccount *name* of *namespace*, bound to a ClusterRole of its own name: *rules*."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}
    kube.create(f"{rbac}/clusterroles", {**role, "metadata": {"name": name}, "rules": rules})
    bind_cluster_role(kube, name, namespace)
    return name


def bind_cluster_role(kube: Kube, name: str, namespace: str) -> None:
    """ServiceAccount *name* of *namespace* bound to the ClusterRole of its name."""
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )


def write_kubeconfig(path: Path, kube: Kube, token: str) -> Path:
    """A kubeconfig of the control plane, as the holder of *token*."""
    return kubeconfigs.write_kubeconfig(path, kube.server, kube.ca_pem, {"token": token})


class Exporter:
    """The installed ``kdraexp`` as a child process, its two listeners on free ports.

    *ports* (listener, telemetry) takes over a stopped exporter's, for a scraper that already
    knows them. With *probes*, ``/healthz`` is asked on a ``--probe-listen`` port of its own,
    as the chart probes an exporter whose listeners speak TLS.
    """

    def __init__(
        self,
        directory: Path,
        args: list[str],
        env: dict[str, str],
        *,
        ports: tuple[int, int] | None = None,
        probes: bool = False,
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.port, self.telemetry_port = ports or (free_port(), free_port())
        self.probe_port = free_port() if probes else self.port
        self.directory = directory
        listeners = [
            "--listen",
            f"127.0.0.1:{self.port}",
            "--telemetry-listen",
            f"127.0.0.1:{self.telemetry_port}",
        ]
        if probes:
            listeners += ["--probe-listen", f"127.0.0.1:{self.probe_port}"]
        self.process = start_exporter([*listeners, *args], directory, env)
        wait_until(lambda: self._up(), 60, "the exporter answering /healthz")

    def _up(self) -> bool:
        assert self.process.poll() is None, self.log()
        try:
            return scrape(self.probe_port, "/healthz") == (200, "ok\n")
        except OSError:
            return False

    def scrape(self) -> tuple[int, str]:
        return scrape(self.port)

    def telemetry(self) -> str:
        """The exporter's own metrics."""
        code, text = scrape(self.telemetry_port)
        assert code == 200, text
        return text

    def log(self) -> str:
        return (self.directory / "output.log").read_text()

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=30)
