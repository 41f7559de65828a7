"""The real Prometheus Operator takes up the chart as kube-prometheus-stack's does.

The operator (v0.90.1) is built from its Go module by scripts/build-prometheus-operator.sh,
the last of the slow builds (tests/tools.py); ``make operator-e2e`` runs this module alone.

A control plane of its own (kube-apiserver and etcd, no kubelet, no controller manager) with the
operator's CRDs; the operator runs against it with the admin's kubeconfig. The chart is
installed by helm with ``kube-prometheus-stack-values.yaml`` beside a Prometheus resource shaped
as kube-prometheus-stack renders it (selectors on ``release``, its ServiceAccount and the
ClusterRole that lets it get ``/metrics``), and the two Secrets the README has its users make:
the serving certificate, and a token Secret of Prometheus' ServiceAccount. As shipped with
Prometheus 3.16, and again with ``nameOverride``, kube-prometheus-stack's release named
otherwise and Prometheus 2.42 (:data:`SETUPS`). The operator's generated configuration (the
Secret ``prometheus-<name>``), TLS assets (``prometheus-<name>-tls-assets-0``) and rule files
(the ConfigMaps ``prometheus-<name>-rulefiles-<n>``) are then run by that real Prometheus, as
its config reloader would, with what only a pod would give filled in: ``$(SHARD)``,
``$(POD_NAME)``, the TLS assets where the pod mounts them, a kubeconfig for service discovery.
The exporter runs here, not in a pod, on the Deployment's TLS and filter arguments and the
files of its Secret volumes: a Pod object of the Deployment's labels names its ports, and the
Endpoints and EndpointSlice of its Service (as a cluster's controllers would publish both; the
operator's default discovery role, kube-prometheus-stack's too, reads Endpoints) publish a
documentation-range address (Kubernetes refuses loopback there) that an appended relabeling
rewrites to 127.0.0.1, keeping loopback targets only, so nothing else is ever dialled.
Published not ready, as for a pod whose readiness probe has not passed, the exporter's metrics
are left out by the chart's monitor, its telemetry scraped, and the rule for a pod never ready
holds.
"""

from __future__ import annotations

import base64
import gzip
import os
import subprocess
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trustme
import yaml

from tests import dashboard, tools
from tests.e2e import crds, prometheus
from tests.e2e.controlplane import ControlPlane, Kube, start
from tests.e2e.harness import (
    Exporter,
    bind_cluster_role,
    bound_account,
    ensure_namespace,
    wait_until,
    write_kubeconfig,
)
from tests.helm import CHART
from tests.processes import free_port

pytestmark = pytest.mark.slow
NAMESPACE = "monitoring"
EXPORTER = "kube-dra-exporter"
VALUES = CHART / "kube-prometheus-stack-values.yaml"
PUBLISHED = "192.0.2.10"
"""The address the exporter's endpoints publish: TEST-NET-1, rewritten to 127.0.0.1."""
MONITORING = "/apis/monitoring.coreos.com/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
ALLOWED_TTL = 20.0
"""Seconds the installed exporter keeps an allowed answer (``authFilter.allowedTTL``)."""
SHIPPED = yaml.safe_load(VALUES.read_text())
TLS_SECRET: str = SHIPPED["tls"]["existingSecret"]
"""The serving certificate's Secret the values file names, which its users make."""
PROMETHEUS: dict[str, Callable[[], Path]] = {
    "v3.16.0": tools.prometheus3,
    "v2.42.0": tools.prometheus2,
}
"""Prometheus' versions, each built by the project's scripts."""


@attrs.frozen
class Setup:
    """One install: the chart's helm release, and kube-prometheus-stack's release it joins."""

    release: str
    """kube-prometheus-stack's release: its Prometheus selects monitors and rules labelled so."""
    helm_release: str = EXPORTER
    name_override: str = ""
    version: str = "v3.16.0"
    """The Prometheus resource's version, which the operator writes its configuration for."""

    @property
    def prometheus(self) -> str:
        """The Prometheus resource kube-prometheus-stack names after its release."""
        return f"{self.release}-prometheus"

    @property
    def token_secret(self) -> str:
        """The token Secret of Prometheus' ServiceAccount: the values file's, for this release."""
        return f"{self.prometheus}-token"

    @property
    def tls_secret(self) -> str:
        """The serving certificate's Secret: the values file's, or this install's own."""
        return TLS_SECRET if self.fullname == EXPORTER else f"{self.fullname}-tls"

    @property
    def job(self) -> str:
        """The job the chart's monitors give, and its alerts select: the chart's name."""
        return self.name_override or EXPORTER

    @property
    def fullname(self) -> str:
        """The chart's objects' name: the release when it holds the name, else both."""
        if self.job in self.helm_release:
            return self.helm_release
        return f"{self.helm_release}-{self.job}"

    def values(self) -> list[str]:
        """helm's values: kube-prometheus-stack-values.yaml as shipped, then this install's.

        An allowed answer is kept :data:`ALLOWED_TTL` seconds rather than five minutes, so that
        a removed binding is seen to take effect in a running exporter.
        """
        found = ["-f", str(VALUES), "--set", f"authFilter.allowedTTL={ALLOWED_TTL:g}"]
        if self.release != "kube-prometheus-stack":
            for where in ("prometheus.servicemonitor", "prometheusRule", "dashboards"):
                found += ["--set", f"{where}.labels.release={self.release}"]
            found += ["--set", f"authFilter.scrapeCredentials.name={self.token_secret}"]
        if self.name_override:
            found += ["--set", f"nameOverride={self.name_override}"]
        if self.tls_secret != TLS_SECRET:
            found += ["--set", f"tls.existingSecret={self.tls_secret}"]
        return found


SETUPS = [
    Setup("kube-prometheus-stack"),
    Setup("monitoring", helm_release="dra", name_override="gpu-exporter", version="v2.42.0"),
]
"""As shipped; and with nameOverride, a release of kube-prometheus-stack's named otherwise."""


def prometheus_cr(setup: Setup) -> dict[str, Any]:
    """The Prometheus resource as kube-prometheus-stack renders it for *setup*'s release."""
    select = {"matchLabels": {"release": setup.release}}
    name = setup.prometheus
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": name, "release": setup.release},
        },
        # With kube-prometheus-stack's defaults (its *SelectorNilUsesHelmValues: true):
        # monitors and rules of its release, from every namespace.
        "spec": _spec(name, select, setup.version),
    }


def _spec(name: str, select: dict[str, Any], version: str) -> dict[str, Any]:
    return {
        "version": version,
        "image": f"quay.io/prometheus/prometheus:{version}",
        "replicas": 1,
        "shards": 1,
        "serviceAccountName": name,
        "externalUrl": f"http://{name}.{NAMESPACE}:9090",
        "portName": "http-web",
        "retention": "10d",
        "routePrefix": "/",
        "serviceMonitorSelector": select,
        "serviceMonitorNamespaceSelector": {},
        "podMonitorSelector": select,
        "podMonitorNamespaceSelector": {},
        "probeSelector": select,
        "probeNamespaceSelector": {},
        "ruleSelector": select,
        "ruleNamespaceSelector": {},
        "scrapeConfigSelector": select,
        "scrapeConfigNamespaceSelector": {},
        "alerting": {
            "alertmanagers": [
                {
                    "namespace": NAMESPACE,
                    "name": f"{name.removesuffix('-prometheus')}-alertmanager",
                    "port": "http-web",
                    "pathPrefix": "/",
                    "apiVersion": "v2",
                }
            ]
        },
    }


def prometheus_binaries(version: str) -> Path:
    """Prometheus *version*'s directory; the test skipped, loudly, on a host that cannot build it.

    Prometheus 2.42 is built with the node tier's tools, for hosts that can run a node; in CI
    every version must be there.
    """
    try:
        return PROMETHEUS[version]()
    except tools.ToolUnavailable as error:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"Prometheus {version} not run: {error}")


def prometheus_rbac(kube: Kube, setup: Setup) -> None:
    """Prometheus' ServiceAccount and ClusterRole, bound, as kube-prometheus-stack renders them.

    Its rules include ``get`` on ``/metrics``: what the auth filter asks for.
    """
    watched = ["get", "list", "watch"]
    rules = [
        {
            "apiGroups": [""],
            "resources": ["nodes", "nodes/metrics", "services", "endpoints", "pods"],
            "verbs": watched,
        },
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": watched},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": watched},
        {"nonResourceURLs": ["/metrics", "/metrics/cadvisor"], "verbs": ["get"]},
    ]
    bound_account(kube, setup.prometheus, NAMESPACE, rules)


def bind_prometheus(kube: Kube, setup: Setup) -> None:
    """Prometheus' ServiceAccount bound to its ClusterRole, unless it already is."""
    name = setup.prometheus
    if kube.find(f"{RBAC}/clusterrolebindings/{name}") is None:
        bind_cluster_role(kube, name, NAMESPACE)


def _encoded(files: dict[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in files.items()}


def users_secrets(kube: Kube, setup: Setup) -> None:
    """The two Secrets the README has a kube-prometheus-stack user make before the install.

    The serving certificate for the Service's name, with the CA Prometheus verifies it by; and
    a token Secret of Prometheus' ServiceAccount, filled as Kubernetes' token controller (which
    this control plane does not run) would: with a token of that account, bound to the Secret.
    """
    authority = trustme.CA()
    leaf = authority.issue_cert(f"{setup.fullname}.{NAMESPACE}.svc")
    secrets = f"/api/v1/namespaces/{NAMESPACE}/secrets"
    kube.create(
        secrets,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": setup.tls_secret},
            "type": "kubernetes.io/tls",
            "data": _encoded(
                {
                    "tls.crt": leaf.cert_chain_pems[0].bytes(),
                    "tls.key": leaf.private_key_pem.bytes(),
                    "ca.crt": authority.cert_pem.bytes(),
                }
            ),
        },
    )
    bound = kube.create(
        secrets,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": setup.token_secret,
                "annotations": {"kubernetes.io/service-account.name": setup.prometheus},
            },
            "type": "kubernetes.io/service-account-token",
        },
    )
    token = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{setup.prometheus}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "name": setup.token_secret,
                    "uid": bound["metadata"]["uid"],
                }
            },
        },
    )["status"]["token"]
    kube.patch(
        f"{secrets}/{setup.token_secret}",
        {"data": _encoded({"token": token.encode(), "namespace": NAMESPACE.encode()})},
    )


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    started = start(tmp_path_factory.mktemp("operator-plane"))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def operator(plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The operator's CRDs established and the operator running; yields the admin kubeconfig."""
    kube = plane.kube
    binaries = tools.prometheus_operator()
    crds.install(kube, binaries / "crds")
    ensure_namespace(kube, NAMESPACE)
    directory = tmp_path_factory.mktemp("operator")
    kubeconfig = write_kubeconfig(directory / "admin.kubeconfig", kube, kube.token)
    with (directory / "operator.log").open("wb") as log:
        running = subprocess.Popen(
            [
                str(binaries / "operator"),
                f"--web.listen-address=127.0.0.1:{free_port()}",
                f"--namespaces={NAMESPACE}",
                # status.bindings on monitors and rules: Accepted, or why not.
                "--feature-gates=StatusForConfigurationResources=true",
            ],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield kubeconfig
    finally:
        running.terminate()
        running.wait(timeout=30)


@pytest.fixture(scope="module", params=SETUPS, ids=["as-shipped", "name-and-release"])
def installed(plane: ControlPlane, operator: Path, request: pytest.FixtureRequest) -> Setup:
    """The chart installed by helm for kube-prometheus-stack, and the Prometheus resource."""
    setup: Setup = request.param
    prometheus_rbac(plane.kube, setup)
    users_secrets(plane.kube, setup)
    subprocess.run(
        [
            tools.helm(),
            "install",
            setup.helm_release,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            str(operator),
            *setup.values(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    plane.kube.create(f"{MONITORING}/namespaces/{NAMESPACE}/prometheuses", prometheus_cr(setup))
    return setup


def operator_configuration(kube: Kube, prometheus: str, monitored: str) -> str | None:
    """The operator's configuration of Prometheus *prometheus*, once it scrapes *monitored*.

    *monitored* is the chart's ServiceMonitor; None while the configuration is not written.
    """
    secret = kube.find(f"/api/v1/namespaces/{NAMESPACE}/secrets/prometheus-{prometheus}")
    packed = ((secret or {}).get("data") or {}).get("prometheus.yaml.gz")
    if not packed:
        return None
    text = gzip.decompress(base64.b64decode(packed)).decode()
    return text if f"serviceMonitor/{NAMESPACE}/{monitored}/" in text else None


def operator_rule_files(kube: Kube, prometheus: str, monitored: str) -> dict[str, str] | None:
    """The operator's rule files of Prometheus *prometheus*, once they hold *monitored*'s."""
    maps = kube.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps")["items"]
    files = {
        key: value
        for config_map in maps
        if config_map["metadata"]["name"].startswith(f"prometheus-{prometheus}-rulefiles-")
        for key, value in (config_map.get("data") or {}).items()
    }
    return files if any(monitored in key for key in files) else None


def _bindings(kube: Kube, kind: str, setup: Setup) -> list[dict[str, Any]] | None:
    got = kube.get(f"{MONITORING}/namespaces/{NAMESPACE}/{kind}/{setup.fullname}")
    bindings: list[dict[str, Any]] = (got.get("status") or {}).get("bindings") or []
    return bindings or None


def _secret_files(kube: Kube, name: str) -> dict[str, bytes] | None:
    """A Secret of the namespace as the files of its volume; None while it does not exist."""
    secret = kube.find(f"/api/v1/namespaces/{NAMESPACE}/secrets/{name}")
    if secret is None:
        return None
    return {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}


def tls_assets(kube: Kube, name: str, tls_secret: str) -> dict[str, bytes] | None:
    """The operator's files for Prometheus *name*'s pod, once they hold *tls_secret*'s CA."""
    files = _secret_files(kube, f"prometheus-{name}-tls-assets-0") or {}
    return files if any(tls_secret in key for key in files) else None


def exporter_args(kube: Kube, setup: Setup, directory: Path) -> list[str]:
    """The Deployment's TLS and filter arguments, on its Secret volumes written in *directory*.

    What the pod would mount under /etc/kdraexp (the chart's web configuration, the serving
    certificate) is written under *directory*, and the arguments and the web configuration's
    paths point there.
    """
    deployment = kube.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{setup.fullname}")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    mounted = "/etc/kdraexp/"
    for mount in container["volumeMounts"]:
        if mount["mountPath"].startswith(mounted):
            files = _secret_files(kube, secrets[mount["name"]])
            assert files, f"the Secret of the volume {mount['name']}"
            where = directory / mount["mountPath"].removeprefix(mounted)
            where.mkdir(parents=True)
            for key, value in files.items():
                (where / key).write_bytes(value.replace(mounted.encode(), f"{directory}/".encode()))
    found = [
        argument.replace(mounted, f"{directory}/")
        for argument in container["args"]
        if argument.startswith(("--tls-config", "--auth-"))
    ]
    assert any(a.startswith("--tls-config") for a in found) and "--auth-filter" in found, found
    return found


def _publish(kube: Kube, exporter: Exporter, setup: Setup, *, ready: bool = True) -> None:
    """A Pod object naming the exporter's ports, and its Service's Endpoints and EndpointSlice.

    Nothing runs the Pod (no kubelet): it carries the Deployment's labels and the container
    ports by name, which service discovery joins to the endpoints' ports. Not *ready*, its
    address is published as the endpoints controller publishes a pod whose readiness probe
    has not passed.
    """
    _withdraw(kube, setup)
    service = kube.get(f"/api/v1/namespaces/{NAMESPACE}/services/{setup.fullname}")
    labels = service["spec"]["selector"]
    ports = {"http": exporter.port, "telemetry": exporter.telemetry_port}
    pod = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{setup.fullname}-0", "labels": labels},
            "spec": {
                "containers": [
                    {
                        "name": "exporter",
                        "image": "kdraexp",
                        "ports": [
                            {"name": name, "containerPort": port} for name, port in ports.items()
                        ],
                    }
                ]
            },
        },
    )
    target = _target(pod)
    kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/endpoints",
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": setup.fullname, "labels": service["metadata"]["labels"]},
            "subsets": _subsets(target, ports, ready),
        },
    )
    kube.create(
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{setup.fullname}-published",
                "labels": {
                    **service["metadata"]["labels"],
                    "kubernetes.io/service-name": setup.fullname,
                    "endpointslice.kubernetes.io/managed-by": "tests.kdraexp",
                },
            },
            "addressType": "IPv4",
            "endpoints": _sliced(target, ready),
            "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports.items()],
        },
    )


def _target(pod: dict[str, Any]) -> dict[str, str]:
    """What an endpoint's targetRef says of *pod*."""
    return {
        "kind": "Pod",
        "namespace": NAMESPACE,
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
    }


def _subsets(target: dict[str, str], ports: dict[str, int], ready: bool) -> list[dict[str, Any]]:
    addresses = "addresses" if ready else "notReadyAddresses"
    return [
        {
            addresses: [{"ip": PUBLISHED, "targetRef": target}],
            "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports.items()],
        }
    ]


def _sliced(target: dict[str, str], ready: bool) -> list[dict[str, Any]]:
    return [{"addresses": [PUBLISHED], "conditions": {"ready": ready}, "targetRef": target}]


def _now_ready(kube: Kube, exporter: Exporter, setup: Setup) -> None:
    """The published address ready, as once the readiness probe has passed."""
    pod = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{setup.fullname}-0")
    target = _target(pod)
    ports = {"http": exporter.port, "telemetry": exporter.telemetry_port}
    kube.patch(
        f"/api/v1/namespaces/{NAMESPACE}/endpoints/{setup.fullname}",
        {"subsets": _subsets(target, ports, ready=True)},
    )
    kube.patch(
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/"
        f"{setup.fullname}-published",
        {"endpoints": _sliced(target, ready=True)},
    )


def _withdraw(kube: Kube, setup: Setup) -> None:
    """What :func:`_publish` made, deleted where it is."""
    for path in (
        f"/api/v1/namespaces/{NAMESPACE}/pods/{setup.fullname}-0",
        f"/api/v1/namespaces/{NAMESPACE}/endpoints/{setup.fullname}",
        f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices/"
        f"{setup.fullname}-published",
    ):
        if kube.find(path) is not None:
            kube.delete(path)


def runnable(text: str, kubeconfig: Path, rules: Path, certs: Path, setup: Setup) -> dict[str, Any]:
    """The operator's configuration as a Prometheus outside a pod can run it.

    As :func:`~tests.e2e.prometheus.operator_generated` makes it, and at the end of every scrape
    configuration the relabeling to loopback that keeps loopback targets only.
    """
    config = prometheus.operator_generated(text, setup.prometheus, kubeconfig, rules, certs)
    for scrape in config["scrape_configs"]:
        scrape.setdefault("relabel_configs", []).extend(
            [
                {
                    "source_labels": ["__address__"],
                    "regex": rf"{PUBLISHED.replace('.', '[.]')}:(\d+)",
                    "target_label": "__address__",
                    "replacement": "127.0.0.1:$1",
                },
                {
                    "source_labels": ["__address__"],
                    "regex": r"127[.]0[.]0[.]1:\d+",
                    "action": "keep",
                },
            ]
        )
    return config


def _operator_files(
    kube: Kube, setup: Setup, directory: Path
) -> tuple[str, dict[str, str], Path, Path]:
    """The operator's configuration and rule files, the rules and TLS assets written out."""
    written = (kube, setup.prometheus, setup.fullname)
    text = wait_until(partial(operator_configuration, *written), 60, "the operator's configuration")
    files = wait_until(partial(operator_rule_files, *written), 60, "the operator's rule files")
    assets = wait_until(
        partial(tls_assets, kube, setup.prometheus, setup.tls_secret), 60, "the TLS assets"
    )
    rules_dir = directory / "rules"
    rules_dir.mkdir()
    for key, value in files.items():
        (rules_dir / key).write_text(value)
    certs = directory / "certs"
    certs.mkdir()
    for key, content in assets.items():
        (certs / key).write_bytes(content)
    return text, files, rules_dir, certs


def _exporter(kube: Kube, setup: Setup, directory: Path) -> Exporter:
    """The exporter on the Deployment's arguments, with a token of the chart's ServiceAccount."""
    token = kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{setup.fullname}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    exporter_config = write_kubeconfig(directory / "exporter.kubeconfig", kube, token)
    env = {"KUBECONFIG": str(exporter_config)}
    args = exporter_args(kube, setup, directory / "mounted")
    return Exporter(directory / "exporter", args, env, probes=True)


def test_the_operator_scrapes_the_chart(
    plane: ControlPlane, operator: Path, installed: Setup, tmp_path: Path
) -> None:
    """The chart's monitor and rules are accepted; Prometheus scrapes over TLS with its token.

    Both objects are bound to the Prometheus resource and Accepted; Prometheus on the
    operator's configuration scrapes both of the exporter's endpoints over HTTPS (the Service's
    name verified against the CA of the serving Secret) with its ServiceAccount's token, which
    the exporter's filter has the real API server review, with the job the alerts and the
    dashboard use, and loads every rule the operator wrote.  As shipped, and with nameOverride,
    kube-prometheus-stack's release named otherwise and Prometheus 2.42 (the job is then the
    name, which the alerts select and the dashboard's job variable offers).

    Then the binding that lets Prometheus get /metrics is removed and both scrapes of the same
    exporter fail, 403, once its allowed answer is older than ``authFilter.allowedTTL``: no
    restart, no review but the one that denies.
    """
    kube, setup = plane.kube, installed
    binaries = prometheus_binaries(setup.version)
    text, files, rules_dir, certs = _operator_files(kube, setup, tmp_path)
    for kind in ("servicemonitors", "prometheusrules"):
        bindings = wait_until(partial(_bindings, kube, kind, setup), 60, f"{kind} bound")
        bound = [(b["resource"], b["name"]) for b in bindings]
        assert bound == [("prometheuses", setup.prometheus)], bindings
        conditions = {c["type"]: c["status"] for c in bindings[0]["conditions"]}
        assert conditions == {"Accepted": "True"}, bindings

    kube.create(
        "/apis/resource.k8s.io/v1/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": f"operator-gpu-{setup.job}"},
            "spec": {},
        },
    )
    exporter = _exporter(kube, setup, tmp_path)
    try:
        _publish(kube, exporter, setup)
        config = runnable(text, operator, rules_dir, certs, setup)
        chart = f"serviceMonitor/{NAMESPACE}/{setup.fullname}/"
        scrapes = [c for c in config["scrape_configs"] if c["job_name"].startswith(chart)]
        assert len(scrapes) == 2, scrapes
        for scrape in scrapes:
            assert scrape["scheme"] == "https", scrape
            assert scrape["authorization"]["type"] == "Bearer", scrape
        server = tmp_path / "prometheus"
        server.mkdir()
        (server / "check.yml").write_text(yaml.safe_dump(config))
        checked = subprocess.run(
            [str(binaries / "promtool"), "check", "config", str(server / "check.yml")],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        inputs = dashboard.load()["__inputs"]
        (default_job,) = [i["value"] for i in inputs if i["name"] == "VAR_JOB"]
        assert default_job == EXPORTER  # the dashboard's default; its variable offers every job
        job = setup.job
        chart_rules = "".join(v for k, v in files.items() if setup.fullname in k)
        assert f'job="{job}"' in chart_rules
        with prometheus.serve(binaries, config, server) as port:

            def up(value: int) -> list[dict[str, Any]] | None:
                try:
                    found = prometheus.query(port, f'up{{job="{job}"}} == {value}')
                except OSError:
                    return None
                return found if len(found) == 2 else None

            targets = wait_until(partial(up, 1), 120, "both of the exporter's endpoints up")
            assert {t["metric"]["endpoint"] for t in targets} == {"http", "telemetry"}
            classes = prometheus.query(port, f'kube_deviceclass_info{{job="{job}"}}')
            names = {c["metric"]["deviceclass_name"] for c in classes}
            assert f"operator-gpu-{job}" in names

            expected = sum(
                len(group["rules"])
                for key, value in files.items()
                if setup.fullname in key
                for group in yaml.safe_load(value)["groups"]
            )

            def loaded() -> int | None:
                groups = prometheus.api(port, "rules")["groups"]
                rules = [r for g in groups for r in g["rules"]]
                assert all(r["health"] in ("ok", "unknown") for r in rules), rules
                return len(rules) or None

            assert wait_until(loaded, 60, "the rules loaded") == expected

            kube.delete(f"{RBAC}/clusterrolebindings/{setup.prometheus}")

            def refused() -> list[str] | None:
                found = prometheus.api(port, "targets", state="active")["activeTargets"]
                errors = [t["lastError"] for t in found if t["labels"].get("job") == job]
                return errors if len(errors) == 2 and all("403" in e for e in errors) else None

            wait_until(refused, 120, "both scrapes refused 403")
            assert wait_until(partial(up, 0), 60, "both of the exporter's endpoints down")
            assert exporter.process.poll() is None, "the same exporter throughout"
    finally:
        exporter.stop()
        _withdraw(kube, setup)
        bind_prometheus(kube, setup)


def test_a_pod_not_ready_is_not_scraped_and_pages(
    plane: ControlPlane, operator: Path, installed: Setup, tmp_path: Path
) -> None:
    """The chart's monitor leaves out the metrics of a pod not ready; KubeDraExporterDown holds.

    Prometheus scrapes endpoints that are not ready unless told not to, and a first scrape
    after a start waits for the collection made at start. The exporter's address is published
    not ready, as the endpoints controller publishes a pod whose readiness probe has not
    passed (or never passes): Prometheus on the operator's configuration scrapes its
    telemetry, drops its metrics target, and the exporter answers no request for its
    /metrics; the operator's rule for KubeDraExporterDown holds for the pod (pending: it pages
    after its ``for``). Published ready, both endpoints are up and the alert is gone.
    """
    kube, setup, job = plane.kube, installed, installed.job
    binaries = prometheus_binaries(setup.version)
    text, _, rules_dir, certs = _operator_files(kube, setup, tmp_path)
    exporter = _exporter(kube, setup, tmp_path)
    pod = f"{setup.fullname}-0"
    try:
        _publish(kube, exporter, setup, ready=False)
        config = runnable(text, operator, rules_dir, certs, setup)
        server = tmp_path / "prometheus"
        server.mkdir()
        with prometheus.serve(binaries, config, server) as port:

            def up() -> dict[str, int] | None:
                try:
                    found = prometheus.query(port, f'up{{job="{job}"}}')
                except OSError:
                    return None
                return {t["metric"]["endpoint"]: int(t["value"][1]) for t in found} or None

            assert wait_until(up, 120, "the telemetry scraped") == {"telemetry": 1}

            def down() -> list[dict[str, Any]] | None:
                alerts = prometheus.query(
                    port, f'ALERTS{{alertname="KubeDraExporterDown", job="{job}", pod="{pod}"}}'
                )
                return alerts or None

            (alert,) = wait_until(down, 120, "KubeDraExporterDown for the pod not ready")
            assert (alert["metric"]["namespace"], alert["metric"]["alertstate"]) == (
                NAMESPACE,
                "pending",  # firing after its for: 5m
            ), alert
            assert up() == {"telemetry": 1}
            targets = prometheus.api(port, "targets")
            active = [t for t in targets["activeTargets"] if t["labels"].get("job") == job]
            assert [t["labels"]["endpoint"] for t in active] == ["telemetry"], active
            left_out = [
                t["discoveredLabels"]
                for t in targets["droppedTargets"]
                if t["discoveredLabels"].get("__address__") == f"{PUBLISHED}:{exporter.port}"
                and t["discoveredLabels"].get("__meta_kubernetes_endpoint_port_name") == "http"
            ]
            assert left_out, targets["droppedTargets"]
            assert {d["__meta_kubernetes_endpoint_ready"] for d in left_out} == {"false"}
            answered = (
                f'kube_dra_exporter_http_requests_total{{job="{job}", listener="main", '
                'handler="metrics"}'
            )
            assert prometheus.query(port, answered) == []  # not one scrape of its /metrics

            _now_ready(kube, exporter, setup)
            both = wait_until(lambda: up() == {"http": 1, "telemetry": 1}, 120, "both endpoints up")
            assert both  # the DRA metrics scraped
            counted = wait_until(
                partial(prometheus.query, port, answered), 120, "its scrapes counted"
            )
            assert {c["metric"]["code"] for c in counted} == {"200"}, counted

            def resolved() -> bool:
                return not prometheus.query(
                    port, f'ALERTS{{alertname="KubeDraExporterDown", job="{job}"}}'
                )

            assert wait_until(resolved, 120, "KubeDraExporterDown resolved")
    finally:
        exporter.stop()
        _withdraw(kube, setup)
