"""The chart installed as users install it, running the image built from the Dockerfile.

``helm install`` with no value at all: the kubelet pulls nothing (the image is present under the
chart's default name), runs the pod as the chart's securityContext says, probes it Ready, mounts
its projected ServiceAccount token; the exporter reads the cluster through the ``kubernetes``
Service with that token and the chart's RBAC, and logs in the chart's format. A deleted pod ends
with status 0 and its replacement serves; a rollout loses no scrape of the Service, as the
README says (``maxUnavailable: 0``, and each pod answers until it has left the Service).
"""

from __future__ import annotations

import errno
import json
import socket
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from tests.e2e.harness import wait_until
from tests.e2e.simworld import sample_values, samples
from tests.helm import CHART
from tests.node.cluster import Node, http_get

pytestmark = pytest.mark.slow
NAMESPACE = "kdraexp"
RELEASE = "kde"
FULLNAME = "kde-kube-dra-exporter"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
CLASS = "node-installed"
IMAGE = (
    "ghcr.io/gradiant/kube-dra-exporter:"
    + yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
)
"""The chart's default image, which the node holds: built from the Dockerfile."""
UID = 65532


@pytest.fixture(scope="module")
def installed(node: Node) -> Iterator[None]:
    """The chart installed with its defaults, Ready, and a DeviceClass for it to show."""
    node.kube.create(
        "/apis/resource.k8s.io/v1/deviceclasses",
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS}},
    )
    node.install(RELEASE, NAMESPACE)
    yield
    node.helm("uninstall", RELEASE, "--namespace", NAMESPACE)
    node.kube.delete(f"/apis/resource.k8s.io/v1/deviceclasses/{CLASS}")


def scrape_pod(pod: dict[str, Any], port: int = 8080) -> tuple[int, str]:
    code, body = http_get(f"http://{pod['status']['podIP']}:{port}/metrics")
    return code, body.decode()


def shows_class(body: str) -> bool:
    """The exposition shows the cluster: the DeviceClass made for these tests."""
    return any(s["deviceclass_name"] == CLASS for s in samples(body, "kube_deviceclass_info"))


def test_ready_through_the_kubelets_probes(node: Node, installed: None) -> None:
    """The Deployment is Ready because the kubelet's probes of /readyz and /healthz succeed."""
    deployment = node.kube.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{FULLNAME}")
    assert deployment["status"].get("readyReplicas") == 1, deployment["status"]
    pod = node.ready_pod(NAMESPACE, SELECTOR)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == IMAGE
    (status,) = pod["status"]["containerStatuses"]
    assert status["ready"] and status["restartCount"] == 0, status
    uid = pod["metadata"]["uid"]

    def probed(kind: str) -> bool:
        counts = [
            value
            for labels, value in sample_values(node.kubelet_metrics(), "prober_probe_total")
            if labels.get("pod_uid") == uid
            and labels.get("probe_type") == kind
            and labels.get("result") == "successful"
        ]
        return sum(counts) >= 1

    wait_until(lambda: probed("Readiness"), 60, "a successful readiness probe by the kubelet")
    # The liveness probe starts after its initialDelaySeconds (10 s).
    wait_until(lambda: probed("Liveness"), 60, "a successful liveness probe by the kubelet")


def test_runs_as_the_chart_says_seen_from_inside(node: Node, installed: None) -> None:
    """The exporter's own processes run as the chart's securityContext says.

    uid and gid 65532, no capability, no privilege to gain, seccomp filtering, and a root
    filesystem that refuses writes.
    """
    pod = node.ready_pod(NAMESPACE, SELECTOR)
    pids = node.container_pids(pod)
    assert pids
    for pid in pids:
        status = dict(
            line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        assert status["Uid"].split() == [str(UID)] * 4, status["Uid"]
        assert status["Gid"].split() == [str(UID)] * 4, status["Gid"]
        for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[capabilities], 16) == 0, (capabilities, status[capabilities])
        assert status["NoNewPrivs"] == "1"
        assert status["Seccomp"] == "2"  # a filter: RuntimeDefault
    init = pids[0]
    (root,) = [
        line.split()
        for line in Path(f"/proc/{init}/mountinfo").read_text().splitlines()
        if line.split()[4] == "/"
    ]
    assert "ro" in root[5].split(","), root
    with pytest.raises(OSError) as refused:
        Path(f"/proc/{init}/root/opt/kdraexp/written").write_text("no")
    assert refused.value.errno == errno.EROFS


def test_reads_the_cluster_with_its_projected_token(node: Node, installed: None) -> None:
    """The exporter reads the cluster with its projected token and the chart's RBAC.

    Through the kubernetes Service, with the token the kubelet projects, as the chart's
    ServiceAccount, within the chart's ClusterRole: without its binding, the lists fail.
    """
    pod = node.ready_pod(NAMESPACE, SELECTOR)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    (projected,) = [v for v in volumes if v.startswith("kube-api-access-")]
    sources = volumes[projected]["projected"]["sources"]
    assert any("serviceAccountToken" in s for s in sources)
    assert pod["spec"]["serviceAccountName"] == FULLNAME
    pid = node.container_pids(pod)[0]
    # Where the container has it mounted (its /var/run is a link to /run): read from inside.
    (mounted,) = [
        line.split()[4]
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        if line.split()[4].endswith("/secrets/kubernetes.io/serviceaccount")
    ]
    token = Path(f"/proc/{pid}/root{mounted}/token").read_text()
    review = node.kube.create(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )
    assert review["status"]["authenticated"], review
    user = review["status"]["user"]
    assert user["username"] == f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
    # Bound to the pod: the kubelet asked for it (TokenRequest), and renews it.
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [pod["metadata"]["name"]]

    code, body = scrape_pod(pod)
    assert code == 200 and shows_class(body), body[:2000]
    binding_path = f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{NAMESPACE}-{FULLNAME}"
    binding = node.kube.get(binding_path)
    node.kube.delete(binding_path)

    def refused() -> tuple[int, str] | None:
        answer = scrape_pod(pod)
        return answer if answer[0] != 200 else None

    try:
        code, body = wait_until(refused, 30, "lists refused")
        assert code == 500 and "403 Forbidden" in body, body
    finally:
        for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            binding["metadata"].pop(field, None)
        node.kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    wait_until(lambda: scrape_pod(pod)[0] == 200, 30, "lists allowed again")


def test_logs_in_the_charts_format(node: Node, installed: None) -> None:
    """The chart's logFormat json and logLevel info, read through the kubelet.

    One JSON object a line, nothing below info, the in-cluster configuration named.
    """
    pod = node.ready_pod(NAMESPACE, SELECTOR)
    name = pod["metadata"]["name"]
    log = node.text(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/log")
    records = [json.loads(line) for line in log.splitlines()]
    assert records, "no log"
    for record in records:
        assert {"time", "level", "logger", "msg"} <= set(record), record
        assert record["level"] in ("info", "warn", "error", "critical"), record  # not debug
    messages = [r["msg"] for r in records]
    assert any(
        m.startswith("Starting kdraexp ") and "reading https://10.0.0.1 (in-cluster)" in m
        for m in messages
    ), messages
    assert any(m.startswith("Serving metrics on ") for m in messages), messages


@attrs.define
class Scraper:
    """Scrapes an address over and over in a thread, and says how each scrape went."""

    url: str
    outcomes: list[tuple[float, str]] = attrs.field(factory=list)
    running: bool = True
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.running = False
        assert self.thread is not None
        self.thread.join(timeout=30)

    def _run(self) -> None:
        while self.running:
            self.outcomes.append((time.monotonic(), self._once()))
            time.sleep(0.05)

    def _once(self) -> str:
        try:
            code, body = http_get(self.url, timeout=5)
        except urllib.error.URLError as error:
            reason = error.reason
            if isinstance(reason, ConnectionRefusedError):
                return "refused"
            if isinstance(reason, OSError) and reason.errno == errno.EHOSTUNREACH:
                return "unreachable"
            if isinstance(reason, socket.timeout | TimeoutError):
                return "timeout"
            return f"error {reason!r}"
        except (OSError, ValueError) as error:  # a connection reset, an answer cut short
            return f"broken {error!r}"
        if code != 200:
            return f"answered {code} {body[:200]!r}"
        return "ok" if shows_class(body.decode()) else "answered without the cluster"

    def timeline(self, start: float) -> list[tuple[float, str]]:
        """What was not ``ok``, and when, in seconds from *start* (for a failure's message)."""
        return [(round(when - start, 2), o) for when, o in self.outcomes if o != "ok"]

    def between(self, start: float, end: float) -> list[str]:
        return [outcome for when, outcome in self.outcomes if start <= when <= end]


def _service_url(node: Node) -> str:
    service = node.kube.get(f"/api/v1/namespaces/{NAMESPACE}/services/{FULLNAME}")
    return f"http://{service['spec']['clusterIP']}:8080/metrics"


def test_deleted_pod_ends_well_and_is_replaced(node: Node, installed: None) -> None:
    """``kubectl delete pod``: status 0 on SIGTERM, a new pod serves, no scrape answered wrong.

    The exporter stops on SIGTERM with status 0 (the README); while no pod is Ready (one
    replica) a scrape of the Service finds nobody, and none is answered wrong meanwhile.
    """
    old = node.ready_pod(NAMESPACE, SELECTOR)
    name = old["metadata"]["name"]
    scraper = Scraper(_service_url(node))
    scraper.start()
    try:
        wait_until(lambda: "ok" in scraper.between(0, time.monotonic()), 30, "a first scrape")
        began = time.monotonic()
        events = node.watch_pod(NAMESPACE, name, 120)
        next(events)
        node.kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}")
        last = next((e["object"] for e in events if e.get("type") == "DELETED"), None)
        assert last is not None, "the pod not deleted within 120s"
        new = node.ready_pod(NAMESPACE, SELECTOR)
        ready = time.monotonic()
        assert new["metadata"]["name"] != name
        wait_until(lambda: "ok" in scraper.between(ready, time.monotonic()), 30, "scrapes again")
    finally:
        scraper.stop()
    (status,) = last["status"]["containerStatuses"]
    terminated = status["state"].get("terminated") or {}
    assert terminated.get("exitCode") == 0 and terminated.get("reason") == "Completed", status
    assert set(scraper.between(0, began)) == {"ok"}
    unavailable = ("refused", "unreachable", "timeout", "answered 503")
    wrong = [(t, o) for t, o in scraper.timeline(began) if not o.startswith(unavailable)]
    assert not wrong, wrong
    after = scraper.between(ready, time.monotonic())
    assert set(after[after.index("ok") :]) == {"ok"}, after


def test_rollout_loses_no_scrape(node: Node, installed: None) -> None:
    """``kubectl rollout restart``: every scrape of the Service answered in full throughout.

    The new pod is Ready before the old one stops (``maxUnavailable: 0``).
    """
    old = node.ready_pod(NAMESPACE, SELECTOR)
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{FULLNAME}"
    scraper = Scraper(_service_url(node))
    scraper.start()
    try:
        wait_until(lambda: "ok" in scraper.between(0, time.monotonic()), 30, "a first scrape")
        began = time.monotonic()
        restarted = {"kubectl.kubernetes.io/restartedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ")}
        node.kube.patch(path, {"spec": {"template": {"metadata": {"annotations": restarted}}}})

        def rolled() -> bool:
            deployment = node.kube.get(path)
            status = deployment["status"]
            pods = node.pods(NAMESPACE, SELECTOR)
            return (
                status.get("observedGeneration", 0) >= deployment["metadata"]["generation"]
                and status.get("updatedReplicas") == status.get("readyReplicas") == 1
                and status.get("replicas") == 1
                and [p["metadata"]["name"] for p in pods] != [old["metadata"]["name"]]
                and len(pods) == 1
            )

        wait_until(rolled, 180, "the rollout complete, the old pod gone")
    finally:
        scraper.stop()
    outcomes = [outcome for _, outcome in scraper.outcomes]
    assert outcomes and set(outcomes) == {"ok"}, scraper.timeline(began)
