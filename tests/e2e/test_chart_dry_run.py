"""Every object the chart renders is accepted by a real Kubernetes API server (dry run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests import tools
from tests.e2e import crds
from tests.e2e.controlplane import Kube
from tests.e2e.harness import ensure_namespace
from tests.helm import CHART, render

pytestmark = pytest.mark.slow

PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Service": "/api/v1/namespaces/{ns}/services",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "ServiceMonitor": "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
    "PodMonitor": "/apis/monitoring.coreos.com/v1/namespaces/{ns}/podmonitors",
    "PrometheusRule": "/apis/monitoring.coreos.com/v1/namespaces/{ns}/prometheusrules",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
}


@pytest.fixture(scope="module")
def monitor_crds(kube: Kube) -> None:
    """The prometheus-operator CRDs (monitors and rules) from its module, established."""
    crds.install(kube, tools.control_plane() / "crds")
    for namespace in ("exporter", "monitoring"):
        ensure_namespace(kube, namespace)


VALUE_SETS: dict[str, tuple[dict[str, Any], bool]] = {
    "defaults": ({}, False),
    "all-features-podmonitor": (
        {
            "networkPolicy": {"enabled": True},
            "podDisruptionBudget": {"enabled": True},
            "prometheus": {"podmonitor": {"enabled": True}},
        },
        False,
    ),
    "all-features-servicemonitor": (
        {
            "networkPolicy": {"enabled": True},
            "podDisruptionBudget": {"enabled": True, "maxUnavailable": "50%"},
            "prometheus": {"servicemonitor": {"enabled": True}},
            "prometheusRule": {"enabled": True, "namespace": "monitoring"},
            "dashboards": {"enabled": True, "namespace": "monitoring", "folder": "GPU"},
        },
        False,
    ),
    "sharded-watch": (
        {
            "exporter": {"mode": "watch"},
            "sharding": {"enabled": True, "replicas": 4},
            "podDisruptionBudget": {"enabled": True},
            "prometheus": {"servicemonitor": {"enabled": True}},
        },
        False,
    ),
    "production": ({"networkPolicy": {"enabled": True}}, True),
}


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_server_side_dry_run(kube: Kube, monitor_crds: None, name: str) -> None:
    """Each rendered object passes the API server's validation and admission."""
    values, production = VALUE_SETS[name]
    docs = render(values, production=production)
    assert docs
    for doc in docs:
        namespace = doc["metadata"].get("namespace", "")
        answer = kube.create(PATHS[doc["kind"]].format(ns=namespace), doc, dry_run=True)
        assert answer["kind"] == doc["kind"]
        assert answer["metadata"]["name"] == doc["metadata"]["name"]


def test_crds_come_from_the_operator_module() -> None:
    """The CRDs are the prometheus-operator's own files."""
    names = sorted(p.name for p in (tools.control_plane() / "crds").glob("*.yaml"))
    assert names == [
        "monitoring.coreos.com_podmonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
        "monitoring.coreos.com_servicemonitors.yaml",
    ]
    assert Path(CHART / "Chart.yaml").exists()
