"""The Helm chart rendered by a real helm: the original's chart tests, its fixes and additions."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdraexp import __version__
from tests.helm import CHART, RenderError, helm, kinds, notes_chart, render, resource

pytestmark = pytest.mark.slow


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return resource(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def fails(values: dict[str, Any], message: str, **kwargs: Any) -> None:
    with pytest.raises(RenderError) as caught:
        render(values, **kwargs)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "args",
    [
        [],
        [
            "--set",
            "networkPolicy.enabled=true,podDisruptionBudget.enabled=true,"
            "prometheus.podmonitor.enabled=true,prometheusRule.enabled=true,"
            "dashboards.enabled=true",
        ],
        ["-f", str(CHART / "prod-values.yaml"), "--set", "networkPolicy.enabled=true"],
        [
            "--set",
            "tls.enabled=true,tls.certManager.enabled=true,tls.certManager.issuerRef.name=ca,"
            "tls.clientAuthType=RequireAndVerifyClientCert,tls.clientCA.secret=scrapers,"
            "prometheus.servicemonitor.enabled=true,tls.monitor.clientCertSecret=prometheus",
        ],
    ],
    ids=["defaults", "all-features", "production", "tls"],
)
def test_lint_strict(args: list[str]) -> None:
    """helm lint --strict passes over the three value sets CI checks."""
    result = subprocess.run(
        [helm(), "lint", "--strict", str(CHART), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


DEFAULT_ARGS = [
    "--listen=:8080",
    "--telemetry-listen=:8081",
    "--log-level=info",
    "--log-format=json",
    "--max-response-bytes=67108864",
    "--mode=list",
    "--timeout=10",
    "--page-size=500",
    "--resources=resourceclaims,resourceslices,deviceclasses",
    "--cost-share-capacity=memory",
]


def test_defaults_and_probes() -> None:
    """No NetworkPolicy or PDB by default; the options as args; probes on /healthz."""
    docs = render()
    assert "NetworkPolicy" not in kinds(docs) and "PodDisruptionBudget" not in kinds(docs)
    main = container(docs)
    assert main["args"] == DEFAULT_ARGS and "command" not in main
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert main[probe]["httpGet"] == {"path": path, "port": "http", "scheme": "HTTP"}
        assert main[probe]["timeoutSeconds"] <= main[probe]["periodSeconds"]
    assert main["ports"] == [
        {"containerPort": 8080, "name": "http", "protocol": "TCP"},
        {"containerPort": 8081, "name": "telemetry", "protocol": "TCP"},
    ]
    assert resource(docs, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"


def test_pod_answers_until_it_has_left_its_service() -> None:
    """A preStop sleep before SIGTERM by default (kube-proxy catches up meanwhile); 0 for none."""
    assert container(render())["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    assert "lifecycle" not in container(render({"preStopSleepSeconds": 0}))
    with pytest.raises(RenderError, match="preStopSleepSeconds"):
        render({"preStopSleepSeconds": 30})


def test_security_contexts() -> None:
    """Non-root, RuntimeDefault seccomp, no escalation, no capabilities, read-only root."""
    docs = render()
    pod = resource(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container(docs)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }


def test_image_follows_app_version(tmp_path: Path) -> None:
    """An empty image.tag follows appVersion, in the default and production renders."""
    chart = tmp_path / "kube-dra-exporter"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta["appVersion"] = "9.8.7"
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta))
    for production in (False, True):
        docs = render(chart=chart, production=production)
        assert container(docs)["image"] == "ghcr.io/gradiant/kube-dra-exporter:9.8.7"
    docs = render({"image": {"repository": "example/exporter", "tag": "custom"}}, chart=chart)
    assert container(docs)["image"] == "example/exporter:custom"


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ({"digest": "sha256:abc"}, "ghcr.io/gradiant/kube-dra-exporter@sha256:abc"),
        (
            {"tag": "1.0.0", "digest": "sha256:abc"},
            "ghcr.io/gradiant/kube-dra-exporter:1.0.0@sha256:abc",
        ),
        ({"name": "other"}, f"ghcr.io/gradiant/other:{__version__}"),
    ],
)
def test_image_forms(image: dict[str, str], expected: str) -> None:
    """Digest, tag and digest, another name."""
    assert container(render({"image": image}))["image"] == expected


def test_image_name_required() -> None:
    """Without a repository, image.name is required."""
    fails({"image": {"name": ""}}, "image.name must be set when image.repository is empty")


@pytest.mark.parametrize(
    ("kind", "key"), [("PodMonitor", "podmonitor"), ("ServiceMonitor", "servicemonitor")]
)
def test_monitors_use_actual_port(kind: str, key: str) -> None:
    """Each monitor scrapes the container's named port and selects the exporter's namespace."""
    docs = render({"prometheus": {key: {"enabled": True, "namespace": "monitoring"}}})
    monitor = resource(docs, kind)
    endpoint = monitor["spec"]["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"][0]
    port = endpoint["port"] if kind == "PodMonitor" else endpoint["targetPort"]
    assert port in {p["name"] for p in container(docs)["ports"]}
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["exporter"]
    assert monitor["metadata"]["namespace"] == "monitoring"
    annotations = resource(docs, "Deployment")["spec"]["template"]["metadata"].get(
        "annotations", {}
    )
    assert not any(name.startswith("prometheus.io/") for name in annotations)


def test_not_both_monitors() -> None:
    """Enabling both monitors fails."""
    fails(
        {"prometheus": {"podmonitor": {"enabled": True}, "servicemonitor": {"enabled": True}}},
        "not both",
    )


def test_monitor_details() -> None:
    """ServiceMonitor labels, selectorOverride, endpoint properties; no empty prometheus label."""
    docs = render(
        {
            "prometheus": {
                "servicemonitor": {
                    "enabled": True,
                    "labels": {"release": "kps"},
                    "selectorOverride": {"app": "x"},
                    "endpointAdditionalProperties": {"metricRelabelings": [{"action": "keep"}]},
                    "interval": "",
                }
            }
        }
    )
    monitor = resource(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["metadata"]["labels"]["prometheus"] == "default"
    assert monitor["spec"]["selector"]["matchLabels"] == {"app": "x"}
    main, telemetry = monitor["spec"]["endpoints"]
    assert telemetry == {
        "targetPort": "telemetry",
        "path": "/metrics",
        "honorLabels": True,
        "scrapeTimeout": "30s",
        "metricRelabelings": [{"action": "keep"}],
    }
    assert main == {**telemetry, "targetPort": "http", "relabelings": [SKIP_UNREADY_ENDPOINTS]}
    assert "namespaceSelector" not in monitor["spec"]
    pod_monitor = resource(
        render({"prometheus": {"podmonitor": {"enabled": True, "prometheusInstance": ""}}}),
        "PodMonitor",
    )
    assert "prometheus" not in pod_monitor["metadata"]["labels"]


@pytest.mark.parametrize("key", ["servicemonitor", "podmonitor"])
def test_monitor_relabelings_and_telemetry(key: str) -> None:
    """Relabelings on both endpoints, honoured labels; telemetry: false drops the second."""
    relabel = [{"action": "labeldrop", "regex": "pod"}]
    metric_relabel = [{"action": "drop", "sourceLabels": ["__name__"], "regex": "process_.*"}]
    values = {"enabled": True, "relabelings": relabel, "metricRelabelings": metric_relabel}
    monitor = resource(
        render({"prometheus": {key: values}}),
        "ServiceMonitor" if key == "servicemonitor" else "PodMonitor",
    )
    endpoints = monitor["spec"]["endpoints" if key == "servicemonitor" else "podMetricsEndpoints"]
    port = "targetPort" if key == "servicemonitor" else "port"
    assert [e[port] for e in endpoints] == ["http", "telemetry"]
    assert [e["relabelings"][-1:] for e in endpoints] == [relabel, relabel]
    for endpoint in endpoints:
        assert endpoint["metricRelabelings"] == metric_relabel
        assert endpoint["honorLabels"] is True
    alone = resource(
        render({"prometheus": {key: {"enabled": True, "telemetry": False}}}),
        "ServiceMonitor" if key == "servicemonitor" else "PodMonitor",
    )
    assert (
        len(alone["spec"]["endpoints" if key == "servicemonitor" else "podMetricsEndpoints"]) == 1
    )


SKIP_UNREADY_ENDPOINTS = {
    "sourceLabels": [
        "__meta_kubernetes_endpoint_ready",
        "__meta_kubernetes_endpointslice_endpoint_conditions_ready",
    ],
    "regex": ".*false.*",
    "action": "drop",
}
"""An endpoint not ready, found through Endpoints or EndpointSlices, left out."""
SKIP_UNREADY_PODS = {
    "sourceLabels": ["__meta_kubernetes_pod_ready"],
    "regex": "true",
    "action": "keep",
}


@pytest.mark.parametrize(
    ("key", "rule"),
    [("servicemonitor", SKIP_UNREADY_ENDPOINTS), ("podmonitor", SKIP_UNREADY_PODS)],
)
def test_monitors_skip_unready_metrics(key: str, rule: dict[str, Any]) -> None:
    """The DRA metrics of a pod not ready are left out, first; its telemetry is scraped.

    Prometheus scrapes endpoints that are not ready, and the first scrape after a start would
    wait for the collection made at start. skipUnready: false scrapes them as before.
    """
    kind, endpoints = (
        ("ServiceMonitor", "endpoints")
        if key == "servicemonitor"
        else ("PodMonitor", "podMetricsEndpoints")
    )
    relabel = [{"action": "labeldrop", "regex": "pod"}]
    values = {"enabled": True, "relabelings": relabel}
    main, telemetry = resource(render({"prometheus": {key: values}}), kind)["spec"][endpoints]
    assert main["relabelings"] == [rule, *relabel]
    assert telemetry["relabelings"] == relabel
    values["skipUnready"] = False
    for endpoint in resource(render({"prometheus": {key: values}}), kind)["spec"][endpoints]:
        assert endpoint["relabelings"] == relabel
    alone = resource(render({"prometheus": {key: {"enabled": True, "skipUnready": False}}}), kind)
    assert not any("relabelings" in e for e in alone["spec"][endpoints])


def test_ports_priority_and_pull_secrets() -> None:
    """Ports follow the exporter values; priorityClassName beats the global one; pull secrets."""
    docs = render(
        {
            "exporter": {"port": 9100, "telemetryPort": 9101},
            "priorityClassName": "gpu-critical",
            "global": {"priorityClassName": "low", "imagePullSecrets": [{"name": "global"}]},
            "imagePullSecrets": [{"name": "pod"}],
        }
    )
    main = container(docs)
    assert main["args"][:2] == ["--listen=:9100", "--telemetry-listen=:9101"]
    assert [p["containerPort"] for p in main["ports"]] == [9100, 9101]
    service = resource(docs, "Service")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        (9100, "http"),
        (9101, "telemetry"),
    ]
    pod = resource(docs, "Deployment")["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9100"
    assert pod["spec"]["priorityClassName"] == "gpu-critical"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "pod"}]
    assert resource(docs, "ServiceAccount")["imagePullSecrets"] == [{"name": "global"}]
    without_account = resource(
        render(
            {
                "serviceAccount": {"create": False},
                "global": {"imagePullSecrets": [{"name": "global"}]},
                "imagePullSecrets": [{"name": "pod"}],
            }
        ),
        "Deployment",
    )
    assert without_account["spec"]["template"]["spec"]["imagePullSecrets"] == [
        {"name": "pod"},
        {"name": "global"},
    ]


def test_prometheus_annotations() -> None:
    """With no monitor the pod is annotated for scraping; prometheus.enabled=false turns it off."""
    annotations = resource(render(), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {
        "prometheus.io/path": "/metrics",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
    }
    docs = render({"prometheus": {"enabled": False}, "podAnnotations": {"a": "b"}})
    assert resource(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"] == {"a": "b"}


def test_cluster_rbac() -> None:
    """A list-only ClusterRole on the three resources, bound to the ServiceAccount."""
    docs = render()
    role = resource(docs, "ClusterRole")
    assert role["rules"][0] == {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims", "resourceslices", "deviceclasses"],
        "verbs": ["list"],
    }
    binding = resource(docs, "ClusterRoleBinding")
    assert "namespace" not in binding["metadata"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "regression-kube-dra-exporter", "namespace": "exporter"}
    ]
    fails({"rbac": {"useClusterRole": False}}, "cluster-wide list permissions")
    docs = render({"rbac": {"create": False}})
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} & set(kinds(docs))
    docs = render({"rbac": {"useExistingRole": "existing"}})
    assert "ClusterRole" not in kinds(docs)
    assert resource(docs, "ClusterRoleBinding")["roleRef"]["name"] == "existing"


def test_pods_granted_only_when_listed() -> None:
    """Naming pods in exporter.resources adds the core group's pods, with the mode's verbs."""
    default = resource(render(), "ClusterRole")["rules"]
    assert all("" not in rule["apiGroups"] for rule in default)
    values = {
        "exporter": {"mode": "watch", "resources": ["resourceclaims", "deviceclasses", "pods"]}
    }
    docs = render(values)
    rules = resource(docs, "ClusterRole")["rules"]
    assert rules == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "deviceclasses"],
            "verbs": ["list", "watch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    ]
    assert "--resources=resourceclaims,deviceclasses,pods" in container(docs)["args"]


def test_rbac_fixes() -> None:
    """create=false needs no useClusterRole; extra rules append; names differ per namespace."""
    docs = render({"rbac": {"create": False, "useClusterRole": False}})
    assert "ClusterRoleBinding" not in kinds(docs)
    rule = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}
    assert resource(render({"rbac": {"extraRules": [rule]}}), "ClusterRole")["rules"][1] == rule
    other = render(extra=("--namespace", "other"))
    assert (
        resource(other, "ClusterRole")["metadata"]["name"]
        != resource(render(), "ClusterRole")["metadata"]["name"]
    )
    fails({"rbac": {"create": "true"}}, "at '/rbac/create': got string, want boolean")


PDB_CASES = [
    ({}, {"minAvailable": 1}),
    ({"minAvailable": 0}, {"minAvailable": 0}),
    ({"maxUnavailable": 0}, {"maxUnavailable": 0}),
    ({"minAvailable": "50%"}, {"minAvailable": "50%"}),
    ({"maxUnavailable": 1}, {"maxUnavailable": 1}),
]


@pytest.mark.parametrize(("limits", "expected"), PDB_CASES)
def test_pdb(limits: dict[str, Any], expected: dict[str, Any]) -> None:
    """The PDB defaults to minAvailable 1 and keeps zero and percentages as given."""
    docs = render(
        {
            "replicaCount": 3,
            "namespace": "custom",
            "fullnameOverride": "custom-exporter",
            "podDisruptionBudget": {"enabled": True, **limits},
        }
    )
    pdb, deployment = resource(docs, "PodDisruptionBudget"), resource(docs, "Deployment")
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert pdb["metadata"]["namespace"] == "custom"
    assert pdb["metadata"]["name"] == deployment["metadata"]["name"]
    assert deployment["spec"]["replicas"] == 3
    assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == expected
    assert pdb["metadata"]["labels"]["app"] == "kube-dra-exporter"


def test_pdb_rules() -> None:
    """Both limits fail; unhealthyPodEvictionPolicy is rendered."""
    fails(
        {"podDisruptionBudget": {"enabled": True, "minAvailable": 1, "maxUnavailable": 0}},
        "mutually exclusive",
    )
    docs = render(
        {"podDisruptionBudget": {"enabled": True, "unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    )
    assert (
        resource(docs, "PodDisruptionBudget")["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"featureGates": "Example=true"}, "featureGates is unsupported"),
        ({"maxConcurrentChallenges": 60}, "maxConcurrentChallenges is unsupported"),
        (
            {"exporter": {"metricAllowlist": ["a"], "metricDenylist": ["b"]}},
            "exporter.metricAllowlist and exporter.metricDenylist are mutually exclusive",
        ),
    ],
)
def test_unsupported_configuration(values: dict[str, Any], message: str) -> None:
    """Options of the chart's ancestry that the exporter does not have fail clearly."""
    fails(values, message)


def test_exporter_options_become_args() -> None:
    """Every exporter value is a container argument, extraArgs last, quoted as given."""
    values = {
        "exporter": {
            "timeout": 25,
            "pageSize": 1000,
            "resources": ["resourceslices", "deviceclasses", "devicetaintrules"],
            "metricDenylist": ["^kube_resourceslice_device_capacity$", "pool_.*"],
            "metricOptInList": ["kube_x"],
            "deviceAttributes": ["profile", "resource.kubernetes.io/pciBusID"],
            "claimDeviceData": ["uuid", "profile"],
            "deviceCapacities": "memory|multiprocessors",
            "costShareCapacity": "gpu.example.com/memory",
        },
        "extraArgs": ["--metric-allowlist", "x y"],
    }
    assert container(render(values))["args"] == [
        *DEFAULT_ARGS[:6],
        "--timeout=25",
        "--page-size=1000",
        "--resources=resourceslices,deviceclasses,devicetaintrules",
        "--metric-denylist=^kube_resourceslice_device_capacity$,pool_.*",
        "--metric-opt-in-list=kube_x",
        "--device-attributes=profile,resource.kubernetes.io/pciBusID",
        "--claim-device-data=uuid,profile",
        "--device-capacities=memory|multiprocessors",
        "--cost-share-capacity=gpu.example.com/memory",
        "--metric-allowlist",
        "x y",
    ]


def test_watch_mode_and_sharding() -> None:
    """Watch mode adds watch to the ClusterRole; sharding makes pods that shard by their name."""
    docs = render(
        {
            "exporter": {"mode": "watch", "maxStaleness": 120},
            "sharding": {"enabled": True, "replicas": 3},
        }
    )
    assert "Deployment" not in kinds(docs)
    statefulset = resource(docs, "StatefulSet")
    assert statefulset["spec"]["replicas"] == 3
    assert statefulset["spec"]["podManagementPolicy"] == "Parallel"
    services = [doc["metadata"]["name"] for doc in docs if doc["kind"] == "Service"]
    assert statefulset["spec"]["serviceName"] in services
    main = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert main["args"][5:10] == [
        "--mode=watch",
        "--max-staleness=120",
        "--pod=$(POD_NAME)",
        "--total-shards=3",
        "--timeout=10",
    ]
    assert main["env"][0] == {
        "name": "POD_NAME",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
    }
    assert resource(docs, "ClusterRole")["rules"][0]["verbs"] == ["list", "watch"]
    assert resource(render(), "ClusterRole")["rules"][0]["verbs"] == ["list"]


def test_cluster_role_follows_resources() -> None:
    """The ClusterRole lists exactly the resources the exporter lists."""
    role = resource(
        render({"exporter": {"resources": ["resourceslices", "devicetaintrules"]}}), "ClusterRole"
    )
    assert role["rules"][0]["resources"] == ["resourceslices", "devicetaintrules"]


@pytest.mark.parametrize("production", [False, True])
def test_network_policy(production: bool) -> None:
    """The policy selects the exporter, admits Prometheus on http, lets out API and DNS only."""
    docs = render({"networkPolicy": {"enabled": True}}, production=production)
    policy = resource(docs, "NetworkPolicy")
    assert policy["spec"]["podSelector"] == resource(docs, "Deployment")["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    sources = policy["spec"]["ingress"][0]["from"]
    assert len(sources) == 1
    assert sources[0]["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    if production:
        assert sources[0]["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "monitoring"
        }
    else:
        assert "namespaceSelector" not in sources[0]
    assert policy["spec"]["ingress"][0]["ports"] == [
        {"port": "http", "protocol": "TCP"},
        {"port": "telemetry", "protocol": "TCP"},
    ]
    egress = {
        (p["port"], p["protocol"]) for rule in policy["spec"]["egress"] for p in rule["ports"]
    }
    assert egress == {(443, "TCP"), (6443, "TCP"), (53, "TCP"), (53, "UDP")}
    denied = resource(
        render({"networkPolicy": {"enabled": True, "ingress": [], "egress": []}}), "NetworkPolicy"
    )
    assert (denied["spec"]["ingress"], denied["spec"]["egress"]) == ([], [])


def test_labels_consistent() -> None:
    """Every object carries managed-by, helm.sh/chart, component main and the common labels."""
    docs = render(
        {
            "global": {"commonLabels": {"team": "gpu"}},
            "networkPolicy": {"enabled": True},
            "podDisruptionBudget": {"enabled": True},
            "prometheus": {"servicemonitor": {"enabled": True}},
        }
    )
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", doc["kind"]
        assert labels["helm.sh/chart"] == f"kube-dra-exporter-{__version__}", doc["kind"]
        assert labels["app.kubernetes.io/component"] == "main", doc["kind"]
        assert labels["app"] == "kube-dra-exporter", doc["kind"]
        assert labels["team"] == "gpu", doc["kind"]
    pod_labels = resource(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["team"] == "gpu"


def test_node_selector_component_wins() -> None:
    """The component's nodeSelector overrides the global one key by key, as documented."""
    docs = render(
        {
            "global": {"nodeSelector": {"zone": "a", "pool": "global"}},
            "nodeSelector": {"pool": "gpu"},
        }
    )
    selector = resource(docs, "Deployment")["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {"kubernetes.io/os": "linux", "zone": "a", "pool": "gpu"}


def test_extra_objects_and_env() -> None:
    """extraObjects render (maps and template strings); extraEnv reaches the container."""
    docs = render(
        {
            "extraObjects": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "{{ .Release.Name }}-a"},
                },
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ .Release.Name }}-b\n",
            ],
            "extraEnv": [{"name": "KUBECONFIG", "value": "/etc/kdraexp/kubeconfig"}],
        }
    )
    assert resource(docs, "ConfigMap")["metadata"]["name"] == "regression-a"
    assert resource(docs, "Secret")["metadata"]["name"] == "regression-b"
    assert container(docs)["env"] == [{"name": "KUBECONFIG", "value": "/etc/kdraexp/kubeconfig"}]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": "three"}, "at '/replicaCount': got string, want integer"),
        ({"exporter": {"resources": ["namespaces"]}}, "at '/exporter/resources/0'"),
        ({"exporter": {"resources": []}}, "at '/exporter/resources'"),
        ({"exporter": {"timeout": 0}}, "at '/exporter/timeout'"),
        ({"exporter": {"pageSize": "500"}}, "at '/exporter/pageSize': got string, want integer"),
        ({"exporter": {"typo": 1}}, "additional properties 'typo' not allowed"),
        ({"extraArgs": "--timeout=3"}, "at '/extraArgs': got string, want array"),
        ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy'"),
        ({"ingressShim": {}}, "additional properties 'ingressShim' not allowed"),
        ({"http_proxy": "http://proxy"}, "additional properties 'http_proxy' not allowed"),
        ({"clusterResourceNamespace": "x"}, "additional properties 'clusterResourceNamespace'"),
        (
            {"podDisruptionBudget": {"minAvailable": "half"}},
            "at '/podDisruptionBudget/minAvailable'",
        ),
    ],
)
def test_schema_rejects(values: dict[str, Any], message: str) -> None:
    """values.schema.json: wrong types, unknown enums and removed values fail with a clear path."""
    fails(values, message)


def test_kubernetes_version() -> None:
    """Kubernetes older than 1.34 is refused; 1.34 renders."""
    fails({}, "incompatible with Kubernetes v1.33.0", extra=("--kube-version", "1.33.0"))
    render(extra=("--kube-version", "1.34.0"))


def test_notes(tmp_path: Path) -> None:
    """NOTES.txt tells how to reach /metrics."""
    chart = notes_chart(tmp_path)
    notes = resource(render(chart=chart), "ConfigMap")["data"]["notes"]
    assert notes.startswith(
        "kube-dra-exporter 0.2.0 is listing ResourceClaims, ResourceSlices and DeviceClasses\n"
        "cluster-wide"
    ), notes
    every = resource(
        render(
            {
                "exporter": {
                    "mode": "watch",
                    "resources": ["resourceclaims", "resourceslices", "deviceclasses", "pods"],
                    "deviceTaintRules": True,
                }
            },
            chart=chart,
        ),
        "ConfigMap",
    )["data"]["notes"]
    assert every.startswith(
        "kube-dra-exporter 0.2.0 is watching ResourceClaims, ResourceSlices, DeviceClasses, Pods "
        "and DeviceTaintRules\ncluster-wide"
    ), every
    only = render({"exporter": {"resources": ["resourceslices"]}}, chart=chart)
    assert resource(only, "ConfigMap")["data"]["notes"].startswith(
        "kube-dra-exporter 0.2.0 is listing ResourceSlices\ncluster-wide"
    )
    assert (
        "kubectl --namespace exporter port-forward service/regression-kube-dra-exporter 8080:8080"
    ) in notes
    assert "curl http://localhost:8080/metrics" in notes
    assert "prometheus.io/scrape pod annotations" in notes
    assert "/readyz" not in notes and "shards" not in notes
    assert (
        "3 replicas collect independently: deduplicate"
        in (resource(render({"replicaCount": 3}, chart=chart), "ConfigMap")["data"]["notes"])
    )
    sharded = resource(
        render(
            {
                "sharding": {"enabled": True, "replicas": 4},
                "replicaCount": 3,
                "exporter": {"mode": "watch"},
            },
            chart=chart,
        ),
        "ConfigMap",
    )["data"]["notes"]
    assert "4 shards (regression-kube-dra-exporter-0 to -3)" in sharded
    assert "sum their\nseries (do not deduplicate them)" in sharded
    assert "deduplicate their series" not in sharded
    assert "/readyz and /metrics answer 503" in sharded
    assert "allowlists" not in notes
    published = resource(
        render(
            {
                "exporter": {
                    "metricLabelsAllowlist": ["resourceclaims=[team]"],
                    "metricAnnotationsAllowlist": ["pods=[owner]", "resourceclaims=[ * ]"],
                }
            },
            chart=chart,
        ),
        "ConfigMap",
    )["data"]["notes"]
    assert (
        "The allowlists publish labels and annotations to every scraper of /metrics, a series "
        "per distinct value.\nEach key published adds about 2.5Mi per 10,000 objects"
    ) in published
    assert "raise resources.limits.memory\n(192Mi) with them (README, Sizing)." in published
    assert '"resourceclaims=[ * ]" publishes every annotation but' in published
    assert '"pods=[owner]"' not in published
    labels_only = resource(
        render({"exporter": {"metricLabelsAllowlist": ["*=[*]"]}}, chart=chart), "ConfigMap"
    )["data"]["notes"]
    assert "The allowlists publish labels to every scraper" in labels_only
    assert "publishes every annotation" not in labels_only


@pytest.mark.parametrize(
    ("memory", "sized", "cap"),
    [
        (
            "192Mi",
            "enough for up to 4,000 devices (256Mi for 16,000, 512Mi for 64,000)",
            "67108864",
        ),
        ("128Mi", "enough for fewer than 4,000 devices (192Mi for 4,000", "44739242"),
        ("256Mi", "enough for 16,000 devices (512Mi for 64,000)", "89478485"),
        ("1Gi", "enough for 64,000 devices", "357913941"),
        (None, "Memory: no limit (resources.limits.memory unset)", "64Mi"),
    ],
)
def test_notes_say_the_memory_limit_and_what_it_is_sized_for(
    tmp_path: Path, memory: str | None, sized: str, cap: str
) -> None:
    """NOTES.txt names the memory limit in force and the cluster it suffices for.

    By the README's Sizing; and what too small a limit does, and how to see it.
    """
    limits = {"memory": memory} if memory else None
    notes = resource(
        render({"resources": {"limits": limits}}, chart=notes_chart(tmp_path)), "ConfigMap"
    )["data"]["notes"]
    flat = " ".join(notes.split())
    if memory:
        assert f"each pod is limited to {memory} (resources.limits.memory)" in flat, notes
    assert sized in flat, notes
    assert "OOMKilled" in flat, notes
    sizing = f"https://github.com/gradiant/kube-dra-exporter/blob/v{__version__}/README.md#sizing"
    assert f"The Sizing table: {sizing}\n" in notes, notes
    said = "and, with prometheusRule.enabled, KubeDraExporterMemoryNearLimit fires"
    assert (said in flat) == bool(memory), notes
    selector = "app.kubernetes.io/instance=regression,app.kubernetes.io/name=kube-dra-exporter"
    for command in ("get pods", "describe pods", "top pods"):
        assert f"kubectl --namespace exporter {command} -l {selector}" in notes, notes
    assert f"response cap in force, --max-response-bytes={cap} (" in flat, notes


def test_notes_sizing_follows_the_readme() -> None:
    """The limits NOTES.txt names for 4,000, 16,000 and 64,000 devices are the README's."""
    readme = (CHART.parent.parent / "README.md").read_text()
    sizing = readme[readme.index("### Sizing") :]
    end = re.search(r"\n##+ ", sizing)  # the next heading
    assert end is not None
    sizing = sizing[: end.start()]
    rows = {
        cells[0]: cells[-1].split()[0]
        for cells in (
            [cell.strip() for cell in line.strip("|").split("|")]
            for line in sizing.splitlines()
            if line.startswith("| ") and "devices" not in line
        )
    }
    assert rows == {"up to 4,000": "192Mi", "16,000": "256Mi", "64,000": "512Mi"}
    notes = (CHART / "templates" / "NOTES.txt").read_text()
    for devices, limit in (("4,000", 192), ("16,000", 256), ("64,000", 512)):
        assert f"{limit}Mi for {devices}" in notes
        assert f"ge $bytes (mul {limit} 1048576)" in notes


def test_shards_have_a_headless_governing_service_and_a_budget_of_one() -> None:
    """The StatefulSet names a headless Service the monitors do not select; a drain takes one."""
    docs = render(
        {
            "sharding": {"enabled": True, "replicas": 4},
            "podDisruptionBudget": {"enabled": True},
            "prometheus": {"servicemonitor": {"enabled": True}},
        }
    )
    services = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "Service"}
    governing = services[resource(docs, "StatefulSet")["spec"]["serviceName"]]
    assert governing["spec"]["clusterIP"] == "None"
    monitor = resource(docs, "ServiceMonitor")["spec"]["selector"]["matchLabels"]
    selected = [
        name
        for name, service in services.items()
        if monitor.items() <= service["metadata"]["labels"].items()
    ]
    assert selected == ["regression-kube-dra-exporter"]
    budget = resource(docs, "PodDisruptionBudget")["spec"]
    assert budget.get("maxUnavailable") == 1 and "minAvailable" not in budget
    unsharded = render({"podDisruptionBudget": {"enabled": True}})
    assert [d["metadata"]["name"] for d in unsharded if d["kind"] == "Service"] == [
        "regression-kube-dra-exporter"
    ]
    assert resource(unsharded, "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_readme_manifests() -> None:
    """YAML blocks in the README parse; any Kubernetes object in them uses a known API."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    blocks = [part.split("```", 1)[0] for part in readme.split("```yaml")[1:]]
    assert blocks, "the README shows at least one YAML example"
    for block in blocks:
        for doc in yaml.safe_load_all(block):
            if isinstance(doc, dict) and "kind" in doc:
                assert doc["apiVersion"] in {
                    "v1",
                    "apps/v1",
                    "rbac.authorization.k8s.io/v1",
                    "monitoring.coreos.com/v1",
                    "resource.k8s.io/v1",
                }
                if doc["kind"] == "ClusterRole":
                    assert set(doc["rules"][0]["resources"]) == {
                        "resourceclaims",
                        "resourceslices",
                        "deviceclasses",
                    }


@pytest.mark.parametrize(
    ("setting", "served", "listed"),
    [
        ("auto", None, False),
        ("auto", "resource.k8s.io/v1/DeviceTaintRule", True),
        ("auto", "resource.k8s.io/v1beta2/DeviceTaintRule", True),
        (False, "resource.k8s.io/v1/DeviceTaintRule", False),
        (True, None, True),
    ],
)
def test_device_taint_rules_where_served(setting: Any, served: str | None, listed: bool) -> None:
    """DeviceTaintRules are listed (and granted) where the API serves them, unless told not to."""
    extra = ("--api-versions", served) if served else ()
    docs = render({"exporter": {"deviceTaintRules": setting}}, extra=extra)
    args = container(docs)["args"]
    wanted = "resourceclaims,resourceslices,deviceclasses" + (",devicetaintrules" if listed else "")
    assert f"--resources={wanted}" in args
    granted = resource(docs, "ClusterRole")["rules"][0]["resources"]
    assert ("devicetaintrules" in granted) == listed
    assert granted == wanted.split(",")


def _cap(docs: list[dict[str, Any]]) -> str:
    args: list[str] = container(docs)["args"]
    (arg,) = [a for a in args if a.startswith("--max-response-bytes=")]
    return arg.split("=", 1)[1]


def test_response_cap_follows_the_memory_limit() -> None:
    """Unset, the cap is a third of the memory limit (64Mi without one).

    A cap that does not fit the limit, or is no quantity, is refused when the chart renders.
    """
    assert _cap(render()) == str(192 * 2**20 // 3)
    assert _cap(render({"resources": {"limits": {"memory": "1.5Gi"}}})) == str(2**29)
    assert _cap(render({"resources": {"limits": None}})) == "64Mi"
    assert _cap(render({"exporter": {"maxResponseBytes": "32Mi"}})) == "32Mi"
    assert _cap(render({"exporter": {"maxResponseBytes": 33554432}})) == "33554432"
    fails(
        {"exporter": {"maxResponseBytes": "256Mi"}},
        "exporter.maxResponseBytes: 256Mi does not fit resources.limits.memory 192Mi",
    )
    fails(
        {"exporter": {"maxResponseBytes": "lots"}},
        'exporter.maxResponseBytes: "lots" is not a quantity of bytes',
    )
    fails(
        {"resources": {"limits": {"memory": "a lot"}}},
        'resources.limits.memory: "a lot" is not a quantity of bytes',
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"exporter": {"telemetryPort": 8080}},
            "exporter.port and exporter.telemetryPort are both 8080",
        ),
        (
            {"exporter": {"timeout": 30}, "prometheus": {"servicemonitor": {"enabled": True}}},
            "exporter.timeout 30 must be below prometheus.servicemonitor.scrapeTimeout 30s",
        ),
        (
            {
                "exporter": {"timeout": 90},
                "prometheus": {
                    "podmonitor": {"enabled": True, "interval": "2m", "scrapeTimeout": "1m30s"}
                },
            },
            "exporter.timeout 90 must be below prometheus.podmonitor.scrapeTimeout 1m30s",
        ),
        ({"exporter": {"deviceAttributes": ["a/b/c"]}}, "at '/exporter/deviceAttributes/0'"),
        (
            {"exporter": {"hidesAllocatedDevices": ["dra.net", "DRA_NET"]}},
            "at '/exporter/hidesAllocatedDevices/1'",
        ),
        (
            {"prometheus": {"servicemonitor": {"enabled": True, "interval": "10s"}}},
            "prometheus.servicemonitor.interval 10s is shorter than its scrapeTimeout 30s",
        ),
        (
            {
                "exporter": {"timeout": 5},
                "prometheus": {
                    "podmonitor": {"enabled": True, "interval": "20s", "scrapeTimeout": "25s"}
                },
            },
            "prometheus.podmonitor.interval 20s is shorter than its scrapeTimeout 25s",
        ),
        (
            {"resources": {"limits": {"memory": "64Mi"}}},
            "resources.limits.memory 64Mi is below what the exporter holds idle, about 87Mi",
        ),
        (
            {"resources": {"limits": {"memory": 67108864}}},
            "resources.limits.memory 67108864 is below what the exporter holds idle",
        ),
    ],
)
def test_values_that_would_crash_the_pod_are_refused(values: dict[str, Any], message: str) -> None:
    """Each would start a pod that crash-loops or never serves: helm template says which value."""
    fails(values, message)


def test_timeout_below_the_scrape_timeout_renders() -> None:
    """A timeout below the monitor's scrape timeout is accepted."""
    values = {"exporter": {"timeout": 29}, "prometheus": {"servicemonitor": {"enabled": True}}}
    assert "--timeout=29" in container(render(values))["args"]


def test_interval_as_long_as_the_timeout_and_the_smallest_limit_render() -> None:
    """An interval equal to the scrape timeout, and a limit of what the exporter idles at."""
    monitor = {"enabled": True, "interval": "30s", "scrapeTimeout": "30s"}
    docs = render(
        {"prometheus": {"servicemonitor": monitor}, "resources": {"limits": {"memory": "87Mi"}}}
    )
    assert resource(docs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"] == "30s"


def test_readme_values_are_the_defaults() -> None:
    """Each value the README's "Values worth knowing" block shows is the chart's default."""
    readme = (CHART.parent.parent / "README.md").read_text()
    start = readme.index("```yaml\nexporter:")
    shown = yaml.safe_load(readme[start + len("```yaml\n") : readme.index("```\n", start + 7)])
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: Any, default: Any, path: str) -> None:
        if isinstance(node, dict) and node:
            assert isinstance(default, dict), path
            for key, value in node.items():
                assert key in default, f"{path}.{key} is not a value"
                walk(value, default[key], f"{path}.{key}")
        else:
            assert node == default, f"{path}: README shows {node!r}, the default is {default!r}"

    walk(shown, defaults, "")


def _values(schema: dict[str, Any], defaults: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, default or UNSET) of every value the schema knows, an alert as one value."""
    properties = schema.get("properties")
    if not properties or path.startswith("prometheusRule.alerts."):
        yield path, defaults
        return
    for key, sub in properties.items():
        known = isinstance(defaults, dict) and key in defaults
        yield from _values(sub, defaults[key] if known else UNSET, f"{path}.{key}".lstrip("."))


UNSET = object()


def test_chart_readme_lists_every_value_with_its_default() -> None:
    """The chart README's table has one row per value of the schema, with values.yaml's default."""
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    expected = {
        path: "unset" if value is UNSET else f"`{json.dumps(value, separators=(', ', ': '))}`"
        for path, value in _values(schema, defaults)
    }
    rows = {}
    for line in (CHART / "README.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        if line.startswith("| `") and len(cells) == 3:
            rows[cells[0].strip("`")] = cells[1]
    assert rows == expected


@pytest.mark.parametrize(
    ("values", "served", "missing"),
    [
        ({"prometheus": {"servicemonitor": {"enabled": True}}}, (), "ServiceMonitor"),
        ({"prometheus": {"podmonitor": {"enabled": True}}}, (), "PodMonitor"),
        ({"prometheusRule": {"enabled": True}}, (), "PrometheusRule"),
        (
            {
                "prometheus": {"servicemonitor": {"enabled": True}},
                "prometheusRule": {"enabled": True},
            },
            ("ServiceMonitor",),
            "PrometheusRule",
        ),
    ],
)
def test_operator_kinds_need_their_crds(
    values: dict[str, Any], served: tuple[str, ...], missing: str
) -> None:
    """Without the prometheus-operator's CRDs, the chart names the one missing."""
    extra = tuple(f"--api-versions=monitoring.coreos.com/v1/{kind}" for kind in served)
    fails(
        values,
        f"needs the prometheus-operator's {missing} CRD (monitoring.coreos.com/v1/{missing}), "
        "which the cluster does not serve",
        operator=False,
        extra=extra,
    )


def test_kube_prometheus_stack_values_without_the_operator() -> None:
    """The shipped values on a cluster without the operator: the CRD is named, not a mapping."""
    fails(
        {},
        "prometheus.servicemonitor.enabled needs the prometheus-operator's ServiceMonitor CRD",
        operator=False,
        extra=("-f", str(CHART / "kube-prometheus-stack-values.yaml")),
    )


def test_kube_prometheus_stack_in_one_step() -> None:
    """The shipped values turn on the monitor, the rules and the dashboard, one release label."""
    docs = render(extra=("-f", str(CHART / "kube-prometheus-stack-values.yaml")))
    labelled = {
        doc["kind"]
        for doc in docs
        if doc["metadata"]["labels"].get("release") == "kube-prometheus-stack"
    }
    assert labelled == {"ServiceMonitor", "PrometheusRule", "ConfigMap"}
    assert resource(docs, "ConfigMap")["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_kube_prometheus_stack_values_serve_tls_behind_the_filter() -> None:
    """The shipped values serve over TLS behind the filter, scraped with Prometheus' token.

    The serving Secret and the token Secret of Prometheus' ServiceAccount (the README's two
    objects) are named; kube-prometheus-stack's Prometheus may already get /metrics, so no
    binding is made.
    """
    docs = render(extra=("-f", str(CHART / "kube-prometheus-stack-values.yaml")))
    args = resource(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--auth-filter" in args
    assert any(a.startswith("--tls-config=") for a in args), args
    volumes = resource(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "kube-dra-exporter-tls"}} in volumes
    for endpoint in resource(docs, "ServiceMonitor")["spec"]["endpoints"]:
        assert endpoint["scheme"] == "https"
        assert endpoint["tlsConfig"]["ca"] == {
            "secret": {"name": "kube-dra-exporter-tls", "key": "ca.crt"}
        }
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": "kube-prometheus-stack-prometheus-token", "key": "token"},
        }
    assert not [
        doc
        for doc in docs
        if doc["kind"] == "ClusterRoleBinding" and "reader" in doc["metadata"]["name"]
    ]


def test_the_schema_takes_every_kind_listed() -> None:
    """``exporter.resources`` takes exactly the kinds the exporter lists, in their order."""
    import json

    from kdraexp.dra.listing import LIST_ORDER

    schema = json.loads((CHART / "values.schema.json").read_text())
    resources = schema["properties"]["exporter"]["properties"]["resources"]
    assert resources["items"]["enum"] == [kind.plural for kind in LIST_ORDER]


OPTION_SAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "port": ({}, {"port": 9000}, "--listen=:9000"),
    "telemetryPort": ({}, {"telemetryPort": 9001}, "--telemetry-listen=:9001"),
    "logLevel": ({}, {"logLevel": "debug"}, "--log-level=debug"),
    "logFormat": ({}, {"logFormat": "text"}, "--log-format=text"),
    "mode": ({}, {"mode": "watch"}, "--mode=watch"),
    "maxStaleness": (
        {"mode": "watch"},
        {"mode": "watch", "maxStaleness": 120},
        "--max-staleness=120",
    ),
    "maxResponseBytes": ({}, {"maxResponseBytes": "32Mi"}, "--max-response-bytes=32Mi"),
    "timeout": ({}, {"timeout": 25}, "--timeout=25"),
    "pageSize": ({}, {"pageSize": 100}, "--page-size=100"),
    "resources": ({}, {"resources": ["deviceclasses"]}, "--resources=deviceclasses"),
    "deviceTaintRules": (
        {},
        {"deviceTaintRules": True},
        "--resources=resourceclaims,resourceslices,deviceclasses,devicetaintrules",
    ),
    "metricAllowlist": ({}, {"metricAllowlist": ["kube_x"]}, "--metric-allowlist=kube_x"),
    "metricDenylist": ({}, {"metricDenylist": ["kube_y"]}, "--metric-denylist=kube_y"),
    "metricOptInList": ({}, {"metricOptInList": ["kube_z"]}, "--metric-opt-in-list=kube_z"),
    "deviceAttributes": ({}, {"deviceAttributes": ["profile"]}, "--device-attributes=profile"),
    "claimDeviceData": ({}, {"claimDeviceData": ["uuid"]}, "--claim-device-data=uuid"),
    "hidesAllocatedDevices": (
        {},
        {"hidesAllocatedDevices": ["dra.net", "nic.example.com"]},
        "--hides-allocated-devices=dra.net,nic.example.com",
    ),
    "metricLabelsAllowlist": (
        {},
        {"metricLabelsAllowlist": ["resourceclaims=[team,cost-center]", "pods=[*]"]},
        "--metric-labels-allowlist=resourceclaims=[team,cost-center],pods=[*]",
    ),
    "metricAnnotationsAllowlist": (
        {},
        {"metricAnnotationsAllowlist": ["deviceclasses=[hourly-cost]"]},
        "--metric-annotations-allowlist=deviceclasses=[hourly-cost]",
    ),
    "deviceCapacities": ({}, {"deviceCapacities": "memory"}, "--device-capacities=memory"),
    "costShareCapacity": ({}, {"costShareCapacity": "cores"}, "--cost-share-capacity=cores"),
    "expectPools": (
        {"resources": ["deviceclasses", "resourceslices", "nodes"]},
        {
            "resources": ["deviceclasses", "resourceslices", "nodes"],
            "expectPools": ["gpu.nvidia.com=nvidia.com/gpu.present=true"],
        },
        "--expect-pools=gpu.nvidia.com=nvidia.com/gpu.present=true",
    ),
}
"""Per ``exporter.*`` value: the values it is set beside, a value set, the argument it makes."""


def test_every_exporter_value_reaches_an_argument() -> None:
    """Each value of the schema's ``exporter`` changes the exporter's arguments as it says.

    A new value must be added here with the argument it makes: one the template forgets to
    pass fails, as does one passed under another option.
    """
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]["exporter"]["properties"]) == set(OPTION_SAMPLES)
    for name, (beside, changed, argument) in OPTION_SAMPLES.items():
        before = container(render({"exporter": beside}))["args"]
        after = container(render({"exporter": changed}))["args"]
        assert argument in after and argument not in before, (name, after)


def test_nodes_granted_only_when_listed() -> None:
    """The ClusterRole grants list (and watch) on nodes, in the core group, when they are listed."""
    for listed, granted in ((["resourceslices"], False), (["resourceslices", "nodes"], True)):
        for mode in ("list", "watch"):
            docs = render({"exporter": {"resources": listed, "mode": mode}})
            role = next(doc for doc in docs if doc["kind"] == "ClusterRole")
            rules = [r for r in role["rules"] if "nodes" in r["resources"]]
            verbs = ["list", "watch"] if mode == "watch" else ["list"]
            assert rules == (
                [{"apiGroups": [""], "resources": ["nodes"], "verbs": verbs}] if granted else []
            )
            dra = next(r for r in role["rules"] if r["apiGroups"] == ["resource.k8s.io"])
            assert "nodes" not in dra["resources"]


def test_auth_filter_off_by_default() -> None:
    """No flag, no review rules, no metrics-reader role unless authFilter.enabled."""
    docs = render({"prometheus": {"servicemonitor": {"enabled": True}}})
    assert not any(arg.startswith("--auth") for arg in container(docs)["args"])
    rules = resource(docs, "ClusterRole")["rules"]
    assert not any(
        "nonResourceURLs" in rule or "authentication.k8s.io" in rule.get("apiGroups", [])
        for rule in rules
    )
    assert kinds(docs).count("ClusterRole") == 1
    assert all(
        "authorization" not in e for e in resource(docs, "ServiceMonitor")["spec"]["endpoints"]
    )


@pytest.mark.parametrize("kind", ["servicemonitor", "podmonitor"])
def test_auth_filter(kind: str) -> None:
    """The flag, the review rules, the metrics-reader role bound to the subjects given.

    The monitor sends the token through `authorization`, from the Secret named.
    """
    reader = {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
    docs = render(
        {
            "authFilter": {
                "enabled": True,
                "tokenAudiences": ["kdraexp", "metrics"],
                "allowedTTL": 60,
                "metricsReaderSubjects": [reader],
                "scrapeCredentials": {"name": "prometheus-token"},
            },
            "prometheus": {kind: {"enabled": True}},
        }
    )
    args = container(docs)["args"]
    assert args[-3:] == [
        "--auth-filter",
        "--auth-token-audiences=kdraexp,metrics",
        "--auth-allowed-ttl=60",
    ]
    roles = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ClusterRole"}
    exporter = roles["exporter-regression-kube-dra-exporter"]
    assert exporter["rules"][-2:] == [
        {
            "apiGroups": ["authentication.k8s.io"],
            "resources": ["tokenreviews"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["authorization.k8s.io"],
            "resources": ["subjectaccessreviews"],
            "verbs": ["create"],
        },
    ]
    reader_role = roles["exporter-regression-kube-dra-exporter-metrics-reader"]
    assert reader_role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    bindings = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "ClusterRoleBinding"}
    bound = bindings["exporter-regression-kube-dra-exporter-metrics-reader"]
    assert bound["roleRef"]["name"] == "exporter-regression-kube-dra-exporter-metrics-reader"
    assert bound["subjects"] == [reader]
    monitor = resource(docs, "ServiceMonitor" if kind == "servicemonitor" else "PodMonitor")
    endpoints = monitor["spec"]["endpoints" if kind == "servicemonitor" else "podMetricsEndpoints"]
    assert len(endpoints) == 2
    for endpoint in endpoints:
        assert endpoint["authorization"] == {
            "type": "Bearer",
            "credentials": {"name": "prometheus-token", "key": "token"},
        }
        assert "bearerTokenFile" not in endpoint
    probes = container(docs)
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    unbound = render({"authFilter": {"enabled": True}})
    assert "ClusterRoleBinding" in kinds(unbound)  # the exporter's own
    assert not [
        d
        for d in unbound
        if d["metadata"]["name"].endswith("-metrics-reader") and d["kind"] == "ClusterRoleBinding"
    ]


@pytest.mark.parametrize("kind", ["servicemonitor", "podmonitor"])
def test_auth_filter_with_a_monitor_needs_its_token(kind: str) -> None:
    fails(
        {"authFilter": {"enabled": True}, "prometheus": {kind: {"enabled": True}}},
        f"authFilter.enabled with prometheus.{kind}.enabled: set authFilter.scrapeCredentials.name",
    )
    own = {"type": "Bearer", "credentials": {"name": "own", "key": "t"}}
    docs = render(
        {
            "authFilter": {"enabled": True},
            "prometheus": {
                kind: {"enabled": True, "endpointAdditionalProperties": {"authorization": own}}
            },
        }
    )
    monitor = resource(docs, "ServiceMonitor" if kind == "servicemonitor" else "PodMonitor")
    endpoints = monitor["spec"]["endpoints" if kind == "servicemonitor" else "podMetricsEndpoints"]
    assert [e["authorization"] for e in endpoints] == [own, own]


def test_auth_filter_notes(tmp_path: Path) -> None:
    """NOTES.txt's curl carries a token with the filter, and says annotations send none."""
    chart = notes_chart(tmp_path)
    notes = resource(render({"authFilter": {"enabled": True}}, chart=chart), "ConfigMap")
    text = notes["data"]["notes"]
    assert (
        'curl -H "Authorization: Bearer $(kubectl --namespace NAMESPACE create token '
        'SERVICEACCOUNT)" http://localhost:8080/metrics'
    ) in text
    assert "ClusterRole exporter-regression-kube-dra-exporter-metrics-reader" in text
    assert "pod annotations, which send no token" in text
    plain = resource(render(chart=chart), "ConfigMap")["data"]["notes"]
    assert "\n  curl http://localhost:8080/metrics\n" in plain and "token" not in plain


REFUSED: list[tuple[list[str], dict[str, Any], str]] = [
    (["--timeout=0"], {"exporter": {"timeout": 0}}, "at '/exporter/timeout'"),
    (["--page-size=0"], {"exporter": {"pageSize": 0}}, "at '/exporter/pageSize'"),
    (["--max-response-bytes=1Ki"], {"exporter": {"maxResponseBytes": "1Ki"}}, "below 64Ki"),
    (
        ["--max-response-bytes=10000000T"],
        {"exporter": {"maxResponseBytes": "10000000T"}, "resources": {"limits": None}},
        "is not below 8Ei",
    ),
    (["--max-response-bytes=lots"], {"exporter": {"maxResponseBytes": "lots"}}, "not a quantity"),
    (
        ["--max-response-bytes=1e999999"],
        {"exporter": {"maxResponseBytes": "1e999999"}},
        "not a quantity",
    ),
    (
        ["--mode=watch", "--max-staleness=0"],
        {"exporter": {"mode": "watch", "maxStaleness": 0}},
        "at '/exporter/maxStaleness'",
    ),
    (["--listen=:65536"], {"exporter": {"port": 65536}}, "at '/exporter/port'"),
    (
        ["--telemetry-listen=:65536"],
        {"exporter": {"telemetryPort": 65536}},
        "at '/exporter/telemetryPort'",
    ),
    (
        ["--listen=:8080", "--telemetry-listen=:8080"],
        {"exporter": {"telemetryPort": 8080}},
        "both 8080",
    ),
    (["--resources=namespaces"], {"exporter": {"resources": ["namespaces"]}}, "resources/0'"),
    (["--resources="], {"exporter": {"resources": []}}, "at '/exporter/resources'"),
    (
        ["--metric-allowlist=a", "--metric-denylist=b"],
        {"exporter": {"metricAllowlist": ["a"], "metricDenylist": ["b"]}},
        "mutually exclusive",
    ),
    *(
        (
            [f"--{flag}={value}"],
            {"exporter": {key: [value]}},
            f'exporter.{key}: "{value}" is not a regular expression the chart takes',
        )
        for flag, key, value in [
            ("metric-allowlist", "metricAllowlist", "kube_(x"),
            ("metric-denylist", "metricDenylist", "[z-a]"),
            ("metric-opt-in-list", "metricOptInList", "a**"),
        ]
    ),
    (
        ["--device-capacities=mem(ory"],
        {"exporter": {"deviceCapacities": "mem(ory"}},
        'exporter.deviceCapacities: "mem(ory" is not a regular expression the chart takes',
    ),
    (["--device-attributes=a/b/c"], {"exporter": {"deviceAttributes": ["a/b/c"]}}, "tes/0'"),
    (
        ["--device-attributes=a.com/x,b.com/x"],
        {"exporter": {"deviceAttributes": ["a.com/x", "b.com/x"]}},
        "both give the label attribute_x",
    ),
    (["--claim-device-data=" + "k" * 64], {"exporter": {"claimDeviceData": ["k" * 64]}}, "a/0'"),
    (
        ["--claim-device-data=a.b,a-b"],
        {"exporter": {"claimDeviceData": ["a.b", "a-b"]}},
        "both give the label data_a_b",
    ),
    *(
        ([f"--{flag}={value}"], {"exporter": {key: [value]}}, f"at '/exporter/{key}/0'")
        for flag, key, value in [
            ("hides-allocated-devices", "hidesAllocatedDevices", "DRA_NET"),
            ("metric-labels-allowlist", "metricLabelsAllowlist", "nodes=[x]"),
            ("metric-labels-allowlist", "metricLabelsAllowlist", "pods=[a,]"),
            ("metric-annotations-allowlist", "metricAnnotationsAllowlist", "pods=[a**]"),
            ("metric-annotations-allowlist", "metricAnnotationsAllowlist", "pods=[a]x"),
            ("metric-annotations-allowlist", "metricAnnotationsAllowlist", "pods=[a"),
        ]
    ),
    (
        ["--cost-share-capacity=gpu/9memory"],
        {"exporter": {"costShareCapacity": "gpu/9memory"}},
        "at '/exporter/costShareCapacity'",
    ),
    *(
        (
            ["--resources=nodes", f"--expect-pools={pools}"],
            {"exporter": {"resources": ["nodes"], "expectPools": [pools]}},
            "at '/exporter/expectPools/0'",
        )
        for pools in ("GPU=a", "gpu=a in b", "gpu=!a=b", "gpu=,a", "gpu=a,", "gpu=b/cb/c")
    ),
    (
        ["--expect-pools=gpu=a"],
        {"exporter": {"expectPools": ["gpu=a"]}},
        "exporter.expectPools needs nodes in exporter.resources",
    ),
    (["--log-level=verbose"], {"exporter": {"logLevel": "verbose"}}, "at '/exporter/logLevel'"),
    (["--log-format=xml"], {"exporter": {"logFormat": "xml"}}, "at '/exporter/logFormat'"),
    (["--mode=stream"], {"exporter": {"mode": "stream"}}, "at '/exporter/mode'"),
    (
        ["--pod=x-0", "--total-shards=0"],
        {"sharding": {"enabled": True, "replicas": 0}},
        "at '/sharding/replicas'",
    ),
    (
        ["--pod=x-0", "--total-shards=1000000000"],
        {"sharding": {"enabled": True, "replicas": 1000000000}},
        "at '/sharding/replicas'",
    ),
]
"""Per refusal: arguments the exporter refuses, the chart values that would render them, and
what ``helm template`` says of those values."""

UNREACHABLE = {
    "--source {source!r}": "the chart passes no --source: the pod reads its cluster",
    "--mode watch reads a cluster": "the chart passes no --source",
    "--shard and --pod are mutually exclusive": "the chart passes --pod alone",
    "a pod name has at most 253 characters": "the pod's name is the StatefulSet's NAME-ORDINAL",
    "not a StatefulSet pod name": "the pod's name is the StatefulSet's NAME-ORDINAL",
    "--shard: expected a whole number": "the chart passes --pod, never --shard",
    "expected 0 <= shard < total": "a StatefulSet's ordinals are below its replicas",
    'raise ListenError(f"{value!r}: {_EXPECTED}")': "the chart writes :PORT",
    'raise ListenError(f"{value!r}: {error}")': "the chart writes :PORT",
    "raise usage.UsageError(str(error)) from None": "passes on a refusal checked where it is made",
    "does not resolve": "the chart writes :PORT, no host",
    "has no IPv4 or IPv6 address": "the chart writes :PORT, no host",
    "--auth-filter asks the API server to review tokens": "the chart passes no --source",
    "--auth-token-audiences is used by --auth-filter alone": "the chart passes audiences with "
    "--auth-filter only",
    "is TLS already: with --tls-config": "the chart writes :PORT",
    'UsageError(f"--tls-config {error}")': "the chart renders the web configuration itself, "
    "and tests/test_chart_tls.py reads it with the exporter's own parser",
}
"""Refusals of the exporter that no chart value can reach, with why (the test keeps it true)."""

STARTING = {
    "kdraexp/app/tap.py": (
        "_seconds",
        "_page_size",
        "_bytes",
        "postOptions",
        "_check_listeners",
        "_protection",
        "_shard",
    ),
    "kdraexp/families/selection.py": None,
    "kdraexp/dra/labelselector.py": ("label_selector",),
    "kdraexp/serve/listen.py": ("endpoint", "_where", "resolve"),
    "kdraexp/store/sharding.py": ("__attrs_post_init__", "ordinal"),
}
"""Where the exporter refuses what it is given at start: each module's functions (None: all)."""


def _raise_sites() -> dict[tuple[str, int], str]:
    """Each ``raise`` of :data:`STARTING`'s functions: (file, first line) to its source text."""
    import ast

    root = CHART.parent.parent
    sites = {}
    for name, functions in STARTING.items():
        source = (root / name).read_text()
        for function in ast.walk(ast.parse(source)):
            if not isinstance(function, ast.FunctionDef):
                continue
            if functions is not None and function.name not in functions:
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Raise):
                    text = ast.get_source_segment(source, node) or ""
                    sites[str(root / name), node.lineno] = text
    return sites


def _refused_at(args: list[str]) -> set[tuple[str, int]]:
    """The exporter's refusal of *args*: the (file, line) of each exception of the chain."""
    import contextlib
    import io

    from kdraexp.app.tap import Options

    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as caught:
        Options().parseOptions(args)
    assert caught.value.code == 2, args
    found = set()
    error: BaseException | None = caught.value
    while error is not None:
        traceback = error.__traceback__
        while traceback is not None and traceback.tb_next is not None:
            traceback = traceback.tb_next
        if traceback is not None:
            found.add((traceback.tb_frame.f_code.co_filename, traceback.tb_lineno))
        error = error.__cause__ or error.__context__
    return found


def test_every_refusal_of_the_exporter_is_the_charts() -> None:
    """Each value the exporter refuses as it starts, the chart refuses as it renders.

    Every ``raise`` where the exporter reads its arguments is either reached by a row of
    :data:`REFUSED`, whose arguments the exporter refuses and whose chart values ``helm
    template`` refuses, or named unreachable from the chart with why: a new refusal of the
    exporter fails this test until the chart refuses it too.
    """
    sites = _raise_sites()
    reached: set[tuple[str, int]] = set()
    for args, values, message in REFUSED:
        refused = _refused_at(args)
        assert refused & set(sites), (args, "is not refused where the exporter reads it")
        reached |= refused
        fails(values, message)
    spans = {(file, line): line + text.count("\n") for (file, line), text in sites.items()}
    missed = [
        text
        for (file, line), text in sites.items()
        if not any(file == at and line <= number <= spans[file, line] for at, number in reached)
        and not any(fragment in text for fragment in UNREACHABLE)
    ]
    assert not missed, "refused by the exporter, not by the chart:\n" + "\n".join(missed)
    for fragment in UNREACHABLE:
        assert any(fragment in text for text in sites.values()), fragment


def test_the_schema_takes_the_levels_and_formats_the_exporter_takes() -> None:
    """A level or format the exporter stops taking, the chart stops taking too.

    The exporter refuses them in one ``raise`` whatever the names: the walk cannot tell.
    """
    import json

    from kdraexp.app import logs

    schema = json.loads((CHART / "values.schema.json").read_text())
    exporter = schema["properties"]["exporter"]["properties"]
    assert set(exporter["logLevel"]["enum"]) == set(logs.LEVELS)
    assert set(exporter["logFormat"]["enum"]) == set(logs.FORMATS)


def arguments(docs: list[dict[str, Any]]) -> list[str]:
    """The exporter's arguments, from its Deployment or StatefulSet."""
    (workload,) = [doc for doc in docs if doc["kind"] in ("Deployment", "StatefulSet")]
    args: list[str] = workload["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


ACCEPTED: list[dict[str, Any]] = [
    {"exporter": {"pageSize": 1000000}},
    {"sharding": {"enabled": True, "replicas": 1000000}},
    {"exporter": {"maxResponseBytes": "64Ki"}},
    {"exporter": {"metricAllowlist": ["^kube_resource(claim|slice)_.*$", "[a-z_]+_info|x{2}?"]}},
    {"exporter": {"metricDenylist": ["(?:kube_pod_dra_[a-z]+)", "kube_resourceslice\\.x"]}},
    {"exporter": {"deviceCapacities": "(memory|[^0-9]+/cores)$"}},
    {"exporter": {"claimDeviceData": ["uuid", "a.b"], "deviceAttributes": ["a.com/x", "profile"]}},
    {"exporter": {"metricLabelsAllowlist": [" pods =[ team, app.kubernetes.io/* ]", "*=[]"]}},
    {"exporter": {"costShareCapacity": "gpu.example.com/memory_2"}},
    {
        "exporter": {
            "resources": ["nodes", "resourceslices"],
            "expectPools": ["gpu.example.com=a/b=c,!d, e notin (f, g),h!=", "nic.example.com="],
        }
    },
]
"""Values at the edges of what the chart takes."""


@pytest.mark.parametrize("values", ACCEPTED)
def test_what_the_chart_takes_the_exporter_takes(values: dict[str, Any]) -> None:
    """The arguments the chart renders from values at its edges start the exporter."""
    from kdraexp.app.tap import Options

    args = [arg.replace("$(POD_NAME)", "exporter-0") for arg in arguments(render(values))]
    Options().parseOptions(args)


def test_the_regular_expressions_the_chart_takes_compile() -> None:
    """Every string the chart takes as a metric list's item is a Python regular expression.

    And holds no comma (the exporter splits the lists at commas): random strings over the
    syntax's characters, thousands of them taken. The chart's pattern is written in what
    Python's re and Go's RE2 read alike, and helm takes the first thousand too.
    """
    import json
    import random
    import re
    import warnings

    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    found = re.search(
        r'{{- define "kube-dra-exporter.regularExpression" -}}\n(.*)\n{{- end -}}', helpers
    )
    assert found is not None
    syntax = re.compile(found[1])
    rng = random.Random(0)
    taken, refused = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(100_000):
            text = "".join(
                rng.choice("a_:/.-[]^$()|?*+{}09zA\\, ") for _ in range(rng.randint(1, 9))
            )
            if syntax.fullmatch(text):
                taken.append(text)
                assert "," not in text
                re.compile(text)
            elif "," not in text:
                refused.append(text)
    assert len(taken) > 10_000
    broken = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a nested set's warning: it compiles all the same
        for text in refused:
            try:
                re.compile(text)
            except re.error:
                broken.append(text)
    for text in broken[:20]:
        fails(
            {},
            "is not a regular expression the chart takes",
            extra=("--set-json", f"exporter.metricAllowlist={json.dumps([text])}"),
        )
    given = json.dumps(taken[:1000])  # as JSON: YAML would read 0_9 or 0:9 as a number
    args = arguments(render(extra=("--set-json", f"exporter.metricDenylist={given}")))
    assert f"--metric-denylist={','.join(taken[:1000])}" in args


def _allowlist(text: str) -> None:
    from kdraexp.families.allowlist import allowlist_of

    allowlist_of("--metric-labels-allowlist", text)


def _pools(text: str) -> None:
    from kdraexp.families.options import expected_pools_of

    expected_pools_of([text])


@pytest.mark.parametrize(
    ("value", "read", "starts", "pieces"),
    [
        (
            "metricLabelsAllowlist",
            _allowlist,
            ["pods=[", " * =[", "resourceclaims =[", "nodes=[", "pods= ["],
            ["a", "b.c/d-e", "*", ",", " ", "\t", "=", "[", "]", "]x"],
        ),
        (
            "expectPools",
            _pools,
            ["gpu.example.com=", "GPU=", "a="],
            [
                "a",
                "b/c",
                "x.y-z",
                "=",
                "==",
                "!=",
                "!",
                " ",
                "\t",
                ",",
                "(",
                ")",
                " in ",
                " notin ",
            ],
        ),
    ],
)
def test_what_the_schema_takes_the_exporter_reads(
    value: str, read: Any, starts: list[str], pieces: list[str]
) -> None:
    """Random strings of an option's pieces: each the schema's pattern takes, the exporter reads."""
    import json
    import random
    import re

    schema = json.loads((CHART / "values.schema.json").read_text())
    pattern = re.compile(schema["properties"]["exporter"]["properties"][value]["items"]["pattern"])
    rng = random.Random(0)
    taken = 0
    for _ in range(50_000):
        text = rng.choice(starts) + "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7)))
        if pattern.fullmatch(text):
            taken += 1
            read(text)
    assert taken > 500
