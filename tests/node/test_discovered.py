"""Prometheus finds the exporter's pod as kube-prometheus-stack's does, and alerts on the node.

The Prometheus Operator (v0.90.1, scripts/build-prometheus-operator.sh) runs against the node's
cluster with its CRDs; the chart is installed with ``kube-prometheus-stack-values.yaml`` beside
Prometheus resources shaped as kube-prometheus-stack renders them, one for Prometheus 3.16 and
one for 2.42 (built from its module: Debian's has no Kubernetes discovery). Each Prometheus runs
the configuration and rule files the operator generates for it, with what its pod would give
filled in (``$(SHARD)``, ``$(POD_NAME)``, a kubeconfig for service discovery): it discovers the
exporter through the chart's Service's endpoints, which the endpoints controller made of the pod
the kubelet runs, scrapes the pod's address on both ports with the job the dashboard selects,
loads every rule of the chart, and fires an alert for a cause on the node: a claim for more
devices than the DRA driver publishes.
"""

from __future__ import annotations

import copy
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import dashboard, tools
from tests.e2e import crds, prometheus
from tests.e2e.harness import wait_until
from tests.e2e.test_operator import (
    Setup,
    operator_configuration,
    operator_rule_files,
    prometheus_cr,
    prometheus_rbac,
    tls_assets,
    users_secrets,
)
from tests.helm import CHART
from tests.node import driver, host
from tests.node.cluster import Node
from tests.node.driver import Driver
from tests.processes import free_port

pytestmark = pytest.mark.slow
NAMESPACE = "monitoring"
SETUP = Setup("kube-prometheus-stack")
EXPORTER = "kube-dra-exporter"
"""The release, the chart's objects and the job: as kube-prometheus-stack users install it."""
VERSIONS: dict[str, tuple[str, Callable[[], Path]]] = {
    "3.16": ("v3.16.0", tools.prometheus3),
    "2.42": ("v2.42.0", tools.prometheus2),
}
"""Each Prometheus release run: its version in the Prometheus resource, its binaries."""
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
PODS = "/api/v1/namespaces/default/pods"
ALERT = "DRAResourceClaimUnsatisfiable"
INTERVAL = "5s"
"""How often the exporter is scraped and the rules evaluated (30 s by default)."""


@pytest.fixture(scope="module")
def operator(node: Node) -> Iterator[subprocess.Popen[bytes]]:
    """The operator's CRDs established and the operator running against the node's cluster."""
    binaries = tools.prometheus_operator()
    crds.install(node.kube, binaries / "crds")
    node.kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    with (host.ROOT / "logs" / "prometheus-operator.log").open("wb") as log:
        running = host.spawn(
            "prometheus-operator",
            [
                str(binaries / "operator"),
                f"--web.listen-address=127.0.0.1:{free_port()}",
                f"--namespaces={NAMESPACE}",
            ],
            log,
            env={**os.environ, "KUBECONFIG": str(node.kubeconfig)},
        )
    yield running
    host.stop(running)


def resource(release: str) -> dict[str, Any]:
    """The Prometheus resource of kube-prometheus-stack, for Prometheus *release*."""
    found = prometheus_cr(SETUP)
    version = VERSIONS[release][0]
    if release != "3.16":
        found = copy.deepcopy(found)
        found["metadata"]["name"] = f"{SETUP.prometheus}-{release.replace('.', '-')}"
        found["spec"]["serviceAccountName"] = found["metadata"]["name"]
    found["spec"]["version"] = version
    found["spec"]["image"] = f"quay.io/prometheus/prometheus:{version}"
    # The test runs the operator's configuration itself: no pod of an image no registry serves.
    found["spec"]["replicas"] = 0
    found["spec"]["evaluationInterval"] = INTERVAL
    return found


@pytest.fixture(scope="module")
def installed(node: Node, operator: subprocess.Popen[bytes]) -> Iterator[None]:
    """The chart for kube-prometheus-stack, its alert at once, and the Prometheus resources.

    The alert fires as soon as its condition holds (``for: 0m``); the exporter is scraped and
    the rules evaluated every :data:`INTERVAL` (30 s by default), the exporter's timeout below
    the scrape's, as the chart requires: values of the chart and of kube-prometheus-stack.
    Prometheus' ServiceAccount and ClusterRole as kube-prometheus-stack makes them, and the two
    Secrets the file's users make: the exporter serves over TLS behind the auth filter.
    """
    prometheus_rbac(node.kube, SETUP)
    users_secrets(node.kube, SETUP)
    node.install(
        EXPORTER,
        NAMESPACE,
        "-f",
        str(CHART / "kube-prometheus-stack-values.yaml"),
        "--set",
        f"prometheusRule.alerts.{ALERT}.for=0m",
        "--set",
        f"prometheus.servicemonitor.interval={INTERVAL}",
        "--set",
        f"prometheus.servicemonitor.scrapeTimeout={INTERVAL}",
        "--set",
        "exporter.timeout=4",
    )
    for release in VERSIONS:
        node.kube.create(
            f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/prometheuses", resource(release)
        )
    yield
    node.helm("uninstall", EXPORTER, "--namespace", NAMESPACE)


@pytest.fixture(scope="module")
def unsatisfiable(node: Node) -> Iterator[str]:
    """The DRA driver's pool on the node, and a pod whose claim asks for one device more."""
    running = Driver(node)
    running.start()
    driver.ensure_class(node.kube)
    name = "one-too-many"
    node.kube.create(CLAIMS, driver.claim(name, count=driver.DEVICES + 1))
    node.kube.create(PODS, driver.pod(name, name))

    def unschedulable() -> bool:
        conditions = node.kube.get(f"{PODS}/{name}")["status"].get("conditions", [])
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
        )

    wait_until(unschedulable, 60, "the scheduler finding no room for the claim")
    yield name
    node.kube.delete(f"{PODS}/{name}")
    wait_until(lambda: not _exists(node, f"{PODS}/{name}"), 60, "the pod gone")
    node.kube.delete(f"{CLAIMS}/{name}")
    running.stop()


def _exists(node: Node, path: str) -> bool:
    return node.kube.find(path) is not None


def generated(
    node: Node, operator: subprocess.Popen[bytes], name: str
) -> tuple[str, dict[str, str]] | None:
    """The operator's configuration and rule files for Prometheus *name*, with the chart's."""
    assert operator.poll() is None, node.log("prometheus-operator")
    text = operator_configuration(node.kube, name, EXPORTER)
    if text is None:
        return None
    files = operator_rule_files(node.kube, name, EXPORTER)
    return None if files is None else (text, files)


def test_prometheus_finds_scrapes_and_alerts(
    node: Node,
    operator: subprocess.Popen[bytes],
    installed: None,
    unsatisfiable: str,
    tmp_path: Path,
) -> None:
    """Both Prometheus releases discover, scrape, load the rules and fire the alert.

    They discover the pod through the Service, scrape its address on both ports as the
    dashboard's job, load every rule of the chart, and fire the alert for the claim.
    """
    pod = node.ready_pod(NAMESPACE, f"app.kubernetes.io/instance={EXPORTER}")
    address = pod["status"]["podIP"]
    (job,) = [i["value"] for i in dashboard.load()["__inputs"] if i["name"] == "VAR_JOB"]
    assert job == EXPORTER
    with ExitStack() as running:
        ports = {}
        expected_rules = {}
        for release, (_, binaries) in VERSIONS.items():
            name = resource(release)["metadata"]["name"]
            text, files = wait_until(
                partial(generated, node, operator, name), 60, f"{name}'s configuration"
            )
            rules = tmp_path / release / "rules"
            rules.mkdir(parents=True)
            for key, value in files.items():
                (rules / key).write_text(value)
            assets = wait_until(
                partial(tls_assets, node.kube, name, SETUP.tls_secret), 60, f"{name}'s TLS"
            )
            certs = tmp_path / release / "certs"
            certs.mkdir()
            for key, content in assets.items():
                (certs / key).write_bytes(content)
            expected_rules[release] = sum(
                len(group["rules"])
                for key, value in files.items()
                if EXPORTER in key
                for group in yaml.safe_load(value)["groups"]
            )
            config = prometheus.operator_generated(text, name, node.kubeconfig, rules, certs)
            ports[release] = running.enter_context(
                prometheus.serve(binaries(), config, tmp_path / release)
            )

        for release, port in ports.items():

            def targets(port: int = port) -> list[dict[str, Any]] | None:
                try:
                    found = prometheus.query(port, f'up{{job="{job}"}} == 1')
                except OSError:
                    return None
                return found if len(found) == 2 else None

            up = wait_until(targets, 120, f"Prometheus {release} scraping both endpoints")
            assert {(t["metric"]["endpoint"], t["metric"]["instance"]) for t in up} == {
                ("http", f"{address}:8080"),
                ("telemetry", f"{address}:8081"),
            }, (release, up)
            for target in up:
                labels = target["metric"]
                assert labels["pod"] == pod["metadata"]["name"], (release, labels)
                assert (labels["namespace"], labels["service"]) == (NAMESPACE, EXPORTER)
            classes = prometheus.query(port, f'kube_deviceclass_info{{job="{job}"}}')
            assert driver.CLASS in {c["metric"]["deviceclass_name"] for c in classes}

            def loaded(port: int = port) -> int | None:
                groups = prometheus.api(port, "rules")["groups"]
                found = [r for g in groups for r in g["rules"]]
                assert all(r["health"] in ("ok", "unknown") for r in found), found
                return len(found) or None

            assert (
                wait_until(loaded, 60, f"Prometheus {release}'s rules") == expected_rules[release]
            )

            def firing(port: int = port) -> list[dict[str, Any]] | None:
                alerts = prometheus.query(
                    port, f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}'
                )
                return alerts or None

            (alert,) = wait_until(firing, 150, f"{ALERT} firing on Prometheus {release}")
            labels = alert["metric"]
            assert (labels["namespace"], labels["resourceclaim_name"]) == (
                "default",
                unsatisfiable,
            ), labels
            assert labels["deviceclass_name"] == driver.CLASS
