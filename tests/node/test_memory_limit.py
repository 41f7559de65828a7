"""The chart's memory limit is real: its default ``resources`` serve the cluster its README says.

The README's Sizing table says the default limit (192Mi) serves up to 4,000 devices, and the
benchmark's 16,000-device cluster peaks at 121-149 MiB: here the exporter, installed by the
chart with its default ``resources``, reads that 16,000-device cluster (benchmarks/cluster.py,
served by the benchmark's fake API on the pods' bridge) under the kubelet's memory cgroup, and is
scraped as Prometheus scrapes (gzip) again and again, then once more after every object changed
(the fake's ``/renew``). No OOM kill, no restart, and its peak, read from the cgroup and from the
kernel's high-water marks of its processes, inside the limit.

The exporter is pointed at the fake API with a kubeconfig (``extraEnv`` and a volume, as the
chart's values say); the pod mounts no ServiceAccount token, so that it does not read its own
cluster in-cluster instead.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from tests.e2e.harness import wait_until
from tests.node import host
from tests.node.cluster import Node, http_get, memory_cgroup
from tests.processes import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent.parent
NAMESPACE = "sizing"
RELEASE = "sized"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
NODES = 2000
DEVICES = NODES * 8
LIMIT = 192 * 1024 * 1024
"""The chart's default resources.limits.memory (checked against the rendered chart below)."""


@attrs.frozen
class FakeAPI:
    """The benchmark's fake API, started: where it serves, once it does."""

    url: str
    process: subprocess.Popen[bytes]

    def wait(self) -> None:
        """Wait until it serves: making the cluster and encoding its pages takes a while."""

        def serving() -> bool:
            assert self.process.poll() is None, (host.ROOT / "logs" / "fake-api.log").read_text()
            try:
                return http_get(f"{self.url}/stats", timeout=5)[0] == 200
            except OSError:
                return False

        wait_until(serving, 120, "the fake API serving")


@pytest.fixture(scope="module")
def fake_api(node: Node) -> Iterator[FakeAPI]:
    """The benchmark's fake API with the 16,000-device cluster, where pods reach it.

    Not waited for: it makes the cluster while the chart is installed (the exporter calls no
    API until it is scraped).
    """
    port = free_port()
    with (host.ROOT / "logs" / "fake-api.log").open("wb") as log:
        process = host.spawn(
            "fake-api",
            [
                sys.executable,
                "-c",
                "import sys; from benchmarks.fakeapi import serve; "
                "serve(int(sys.argv[1]), int(sys.argv[2]), host=sys.argv[3])",
                str(NODES),
                str(port),
                host.GATEWAY,
            ],
            log,
            cwd=ROOT,
        )
    try:
        yield FakeAPI(f"http://{host.GATEWAY}:{port}", process)
    finally:
        host.stop(process)


def _kubeconfig(server: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": server}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
        }
    )


@pytest.fixture(scope="module")
def sized(
    node: Node, fake_api: FakeAPI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """The chart, default resources, reading the fake API through a mounted kubeconfig."""
    node.kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    node.kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "fake-api"},
            "data": {"kubeconfig": _kubeconfig(fake_api.url)},
        },
    )
    values = {
        "exporter": {"deviceTaintRules": False},  # the fake serves none; the node's cluster does
        "automountServiceAccountToken": False,
        "extraEnv": [{"name": "KUBECONFIG", "value": "/etc/kdraexp/kubeconfig"}],
        "volumes": [{"name": "fake-api", "configMap": {"name": "fake-api"}}],
        "volumeMounts": [{"name": "fake-api", "mountPath": "/etc/kdraexp", "readOnly": True}],
    }
    path = tmp_path_factory.mktemp("sized") / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    node.install(
        RELEASE,
        NAMESPACE,
        "-f",
        str(path),
    )
    yield
    node.helm("uninstall", RELEASE, "--namespace", NAMESPACE)


def scrape(pod: dict[str, Any]) -> str:
    """One scrape as Prometheus makes it (gzip): how it went."""
    try:
        code, body = http_get(f"http://{pod['status']['podIP']}:8080/metrics", 60, gzipped=True)
    except OSError as error:  # the connection dropped: the process killed, say
        return f"failed: {error!r}"
    if code != 200:
        return f"answered {code}: {body[:500]!r}"
    devices = body.decode().count("\nkube_resourceslice_device_info{")  # counted, not parsed
    return "ok" if devices == DEVICES else f"{devices} devices"


def test_default_limit_holds_the_sized_cluster(node: Node, sized: None, fake_api: FakeAPI) -> None:
    """Scraped again and again, and after every object changed, it stays inside the limit.

    No OOM kill, no restart, the peak inside the chart's default limit, as its own cgroup says;
    and every scrape answered with every device.
    """
    pod = node.ready_pod(NAMESPACE, SELECTOR)
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"]["memory"] == "192Mi"  # the chart's default
    cgroup = memory_cgroup(node, pod)
    assert cgroup.limit() == LIMIT
    fake_api.wait()
    scrapes = []
    for turn in range(6):
        if turn == 4:  # every object new, as after a re-list or a replaced cluster
            assert http_get(f"{fake_api.url}/renew?nodes={NODES}", 120)[0] == 200
        scrapes.append(scrape(pod))
    current = node.pod(NAMESPACE, pod["metadata"]["name"])
    (status,) = current["status"]["containerStatuses"]
    # An OOM-killed exporter is restarted in a cgroup of its own: the kubelet says so first.
    assert status["restartCount"] == 0 and not status.get("lastState"), (scrapes, status)
    assert cgroup.oom_kills() == 0, scrapes
    assert scrapes == ["ok"] * 6
    processes = node.container_pids(pod)
    high_water = sum(_high_water(pid) for pid in processes)
    peak = cgroup.peak()
    assert peak <= LIMIT, peak
    assert high_water < LIMIT, (high_water, processes)


def _high_water(pid: int) -> int:
    """The most resident memory the process has held, in bytes (the kernel's VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")
