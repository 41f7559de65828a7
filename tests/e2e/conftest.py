"""The real control plane for the whole session, and helpers to run the exporter against it.

Its binaries are built while the tests are collected (tests/tools.py).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.e2e.controlplane import ControlPlane, Kube, start
from tests.helm import render
from tests.processes import free_port
from tests.processes import start as start_exporter

T = TypeVar("T")


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver for the session."""
    plane = start(tmp_path_factory.mktemp("control-plane"))
    yield plane
    plane.stop()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> Kube:
    """The admin client."""
    return control_plane.kube


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
    from tests.e2e.controlplane import APIError

    try:
        kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except APIError as error:
        if error.code != 409:
            raise


@pytest.fixture(scope="session")
def dra_objects(kube: Kube) -> None:
    """The DRA dataset (tests/e2e/dataset.py), created once for the session."""
    from tests.e2e import dataset

    ensure_namespace(kube, dataset.NAMESPACE)
    dataset.create_all(kube)


CHART_NAMESPACE = "dra-monitoring"
RELEASE_OBJECTS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


@pytest.fixture(scope="session")
def chart_rbac(kube: Kube) -> dict[str, dict[str, Any]]:
    """The chart's ServiceAccount, ClusterRole and ClusterRoleBinding, from helm template."""
    ensure_namespace(kube, CHART_NAMESPACE)
    docs = render(extra=("--namespace", CHART_NAMESPACE))
    created = {}
    for doc in docs:
        if doc["kind"] in RELEASE_OBJECTS:
            kube.create(RELEASE_OBJECTS[doc["kind"]].format(ns=CHART_NAMESPACE), doc)
            created[doc["kind"]] = doc
    assert set(created) == set(RELEASE_OBJECTS)
    return created


RESOURCES = ["resourceclaims", "resourceslices", "deviceclasses", "devicetaintrules"]
"""Every resource, DeviceTaintRules included: what the tests of the newer families list."""


@pytest.fixture(scope="session")
def family_claims(kube: Kube) -> dict[str, dict[str, Any]]:
    """The objects with the newer DRA fields (tests/e2e/families.py); the claims as held."""
    from tests.e2e import families

    return families.create_all(kube)


@pytest.fixture(scope="session")
def stuck_objects(kube: Kube) -> None:
    """Claims and pods stuck on their devices (tests/e2e/stuck.py), created once."""
    from tests.e2e import stuck

    stuck.create_all(kube)


@pytest.fixture(scope="session")
def families_account(kube: Kube, chart_rbac: object) -> str:
    """The chart's RBAC for a release listing devicetaintrules, pods and nodes too.

    The role follows the resources.
    """
    docs = render(
        {"fullnameOverride": "families", "exporter": {"resources": [*RESOURCES, "pods", "nodes"]}},
        extra=("--namespace", CHART_NAMESPACE),
    )
    for doc in docs:
        if doc["kind"] in RELEASE_OBJECTS:
            kube.create(RELEASE_OBJECTS[doc["kind"]].format(ns=CHART_NAMESPACE), doc)
        if doc["kind"] == "ClusterRole":
            assert doc["rules"][0]["resources"] == RESOURCES
            assert doc["rules"][1] == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    return "families"


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


def write_kubeconfig(path: Path, kube: Kube, token: str) -> Path:
    import base64

    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "e2e",
                "clusters": [
                    {
                        "name": "e2e",
                        "cluster": {
                            "server": kube.server,
                            "certificate-authority-data": base64.b64encode(kube.ca_pem).decode(),
                        },
                    }
                ],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "exporter"}}],
                "users": [{"name": "exporter", "user": {"token": token}}],
            }
        )
    )
    return path


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
