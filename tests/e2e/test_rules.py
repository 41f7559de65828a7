"""The chart's alerts fire, and its dashboard's queries answer, on a real Prometheus (2.42, 3.16).

Prometheus scrapes the exporter, which lists the real API server holding the objects of
tests/e2e/families.py, a claim waiting for a class that matches nothing and claims waiting for
shared NICs; a second exporter whose identity may list nothing (in list mode and in watch mode),
and a target where nothing listens, complete the job, with a fourth exporter expecting a
driver's pool on a Node labelled for it that no pool serves. The rules are the chart's,
rendered with every ``for`` at 0s.

This module creates objects that the exact-sample tests of test_cluster.py do not expect: it
runs after them (pytest runs the files in name order).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests import dashboard, tools
from tests.e2e import prometheus, stuck
from tests.e2e.controlplane import Kube
from tests.e2e.families import V1
from tests.e2e.harness import (
    CHART_NAMESPACE,
    RESOURCES,
    Exporter,
    ensure_namespace,
    mint_token,
    wait_until,
    write_kubeconfig,
)
from tests.helm import render, resource
from tests.objects import resource_slice
from tests.processes import free_port
from tests.test_alerts import ALERTS

pytestmark = pytest.mark.slow
JOB = "kdraexp"
NAMESPACE = "alerts"
BARE_NODE = "alerts-bare"
"""A Node no pool of the driver it is labelled for serves."""
NEVER_EMPTY_EXCEPT: dict[str, str] = {}
NOT_LIVE = {
    "KubeDraExporterCertificateExpiring": "the exporters here serve plain HTTP: promtool fires "
    "it on the certificate's expiry in tests/rules, and tests/test_tlsserving.py reads the "
    "expiry it is made of from a served certificate",
    "KubeDraExporterCertificateReloadFailing": "the exporters here serve plain HTTP: promtool "
    "fires it in tests/rules, tests/test_tlsserving.py makes the failed reload it reads",
    "KubeDraExporterMemoryNearLimit": "the exporters here run in no memory-limited cgroup: "
    "promtool fires it in tests/rules, tests/test_memory_warning.py reads the limit and peak it "
    "is made of from an exporter in a real one",
}
"""The chart's alerts that no exporter of this test can make fire, with where they are shown to."""
"""Dashboard panels that can have no data on this cluster, with the reason."""


@pytest.fixture(scope="module")
def scarce_claim(kube: Kube, family_claims: object, dra_objects: None) -> Iterator[None]:
    """A pending claim for a DeviceClass no device matches."""
    ensure_namespace(kube, NAMESPACE)
    kube.create(
        f"{V1}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "alerts-scarce"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nowhere.example'"}}]},
        },
    )
    kube.create(
        f"{V1}/namespaces/{NAMESPACE}/resourceclaims",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "scarce"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "alerts-scarce"}}]
                }
            },
        },
    )
    yield


NIC_DRIVER = "alerts-nic.example"


@pytest.fixture(scope="module")
def shared_nics(kube: Kube, scarce_claim: None) -> None:
    """Two NICs shared by bandwidth, each carrying a 30G share, and a claim waiting for each.

    One sells 10G by default and has 1,570G left: its class is not exhausted, although the NIC
    reads ``allocated``.  The other has no default, so a claim naming no bandwidth takes all of
    it: its class is.
    """
    bandwidth: dict[str, dict[str, Any]] = {
        "default": {
            "value": "1600G",
            "requestPolicy": {
                "default": "10G",
                "validRange": {"min": "10G", "max": "1600G", "step": "10G"},
            },
        },
        "whole": {"value": "100G"},
    }
    for kind in bandwidth:
        expression = (
            f"device.driver == '{NIC_DRIVER}' && device.attributes['{NIC_DRIVER}'].kind == '{kind}'"
        )
        kube.create(
            f"{V1}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": f"alerts-nic-{kind}"},
                "spec": {"selectors": [{"cel": {"expression": expression}}]},
            },
        )
    devices = [
        {
            "name": f"nic-{kind}",
            "attributes": {"kind": {"string": kind}},
            "capacity": {"bandwidth": capacity},
            "allowMultipleAllocations": True,
        }
        for kind, capacity in bandwidth.items()
    ]
    kube.create(
        f"{V1}/resourceslices",
        resource_slice("alerts-nic", devices, NIC_DRIVER, "alerts-nic", nodeName="alerts-node"),
    )
    claims = f"{V1}/namespaces/{NAMESPACE}/resourceclaims"
    for kind in bandwidth:
        for name in (f"nic-{kind}-held", f"nic-{kind}-wait"):
            requests = [{"name": "nic", "exactly": {"deviceClassName": f"alerts-nic-{kind}"}}]
            made = kube.create(
                claims,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": name},
                    "spec": {"devices": {"requests": requests}},
                },
            )
            if name.endswith("-held"):
                share = {
                    "request": "nic",
                    "driver": NIC_DRIVER,
                    "pool": "alerts-nic",
                    "device": f"nic-{kind}",
                    "shareID": "5d0c2f7e-3b1a-4c9e-8f26-7a4e1d9b0c3f",
                    "consumedCapacity": {"bandwidth": "30G"},
                }
                made["status"] = {"allocation": {"devices": {"results": [share]}}}
                kube.request("PUT", f"{claims}/{name}/status", made)


@pytest.fixture(scope="module")
def pod_view(kube: Kube, scarce_claim: None) -> None:
    """A pod waiting for an extended resource, one naming a missing claim, one using a sick device.

    No scheduler runs in this tier: the first stays unbound; the second is bound by hand, and
    its status written as the kubelet writes device health.
    """
    kube.create(
        f"{V1}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "alerts-extended"},
            "spec": {"extendedResourceName": "alerts.example.com/gpu"},
        },
    )
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    container = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
    kube.create(
        pods,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "ext-wait"},
            "spec": {
                "containers": [
                    {**container, "resources": {"limits": {"alerts.example.com/gpu": "1"}}}
                ]
            },
        },
    )
    kube.create(  # names a claim nobody made: claim_missing
        pods,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "orphan"},
            "spec": {
                "containers": [{**container, "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "no-such-claim"}],
            },
        },
    )
    sick = kube.create(
        pods,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "sick"},
            "spec": {
                "nodeName": "alerts-node",
                "containers": [{**container, "resources": {"claims": [{"name": "gpu"}]}}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "scarce"}],
            },
        },
    )
    sick["status"]["containerStatuses"] = [
        {
            "name": "c",
            "image": container["image"],
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "state": {"running": {}},
            "allocatedResourcesStatus": [
                {
                    "name": "claim:gpu",
                    "resources": [{"resourceID": "alerts.example.com/p/d", "health": "Unhealthy"}],
                }
            ],
        }
    ]
    kube.put(f"{pods}/sick/status", sick)


@pytest.fixture(scope="module")
def bare_node(kube: Kube) -> Iterator[None]:
    """A Node labelled for a driver that publishes nothing: no pool of it serves the node."""
    kube.create(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": BARE_NODE, "labels": {"alerts.example.com/gpu": "true"}},
            "spec": {"unschedulable": True},
        },
    )
    yield
    kube.delete(f"/api/v1/nodes/{BARE_NODE}")


@pytest.fixture(scope="module")
def exporters(
    kube: Kube,
    scarce_claim: None,
    shared_nics: None,
    pod_view: None,
    stuck_objects: None,
    bare_node: None,
    families_account: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Exporter, Exporter, Exporter, Exporter]]:
    """The exporter listing everything, two whose ServiceAccount may list nothing, a Node view.

    The first is told that the network driver of tests/e2e/stuck.py hides allocated devices.
    The second lists, the third watches (with a short --max-staleness, so that its watch alerts
    fire within the test).  The fourth expects a pool of alerts.example.com on the nodes
    labelled for it, and writes only what it finds missing (the others' alerts stay as they are).
    """
    directory = tmp_path_factory.mktemp("rules")
    kube.create(
        f"/api/v1/namespaces/{CHART_NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "no-rights"}},
    )
    args = ["--resources", ",".join([*RESOURCES, "pods"])]
    watching = ["--mode", "watch", "--max-staleness", "4"]
    started = []
    for name, account, mode in (
        ("good", families_account, ["--hides-allocated-devices", stuck.NIC_DRIVER]),
        ("refused", "no-rights", []),
        ("watch-refused", "no-rights", watching),
    ):
        config = write_kubeconfig(directory / f"{name}.kubeconfig", kube, mint_token(kube, account))
        started.append(Exporter(directory / name, args + mode, {"KUBECONFIG": str(config)}))
    node_view = [
        "--resources",
        ",".join([*RESOURCES, "nodes"]),
        "--expect-pools",
        "alerts.example.com=alerts.example.com/gpu=true",
        "--metric-allowlist",
        "^kube_node_dra_pool_missing$",
    ]
    config = write_kubeconfig(
        directory / "nodes.kubeconfig", kube, mint_token(kube, families_account)
    )
    started.append(Exporter(directory / "nodes", node_view, {"KUBECONFIG": str(config)}))
    yield started[0], started[1], started[2], started[3]
    for exporter in started:
        assert exporter.stop() == 0


def chart_rules() -> dict[str, Any]:
    """The chart's rules for job kdraexp, every alert at once, thresholds met at once."""
    alerts: dict[str, dict[str, Any]] = {name: {"for": "0s"} for name in ALERTS}
    alerts["DRAResourceClaimPendingTooLong"]["threshold"] = 1
    alerts["DRADeviceBindingSlow"]["threshold"] = 1
    alerts["DRAPodDevicesNotPrepared"]["threshold"] = 1
    alerts["KubeDraExporterSlowCollections"]["threshold"] = 1e-6
    values = {"prometheusRule": {"enabled": True, "job": JOB, "alerts": alerts}}
    spec: dict[str, Any] = resource(render(values), "PrometheusRule")["spec"]
    return spec


@pytest.fixture(scope="module", params=sorted(tools.PROMETHEUS))
def prometheus_port(
    request: pytest.FixtureRequest,
    exporters: tuple[Exporter, Exporter, Exporter, Exporter],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[int]:
    """A Prometheus of each release (tests/tools.py) on the chart's rules, scraping the job."""
    good, refused, watch_refused, node_view = exporters
    directory = tmp_path_factory.mktemp(f"rules-prometheus-{request.param}")
    (directory / "rules.yaml").write_text(yaml.safe_dump(chart_rules()))
    targets = [
        good.port,
        good.telemetry_port,
        refused.port,  # answers 500: its lists are refused
        refused.telemetry_port,
        watch_refused.port,  # answers 503: never synchronised
        watch_refused.telemetry_port,
        node_view.port,
        free_port(),  # nothing listens: up is 0
    ]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(directory / "rules.yaml")],
        "scrape_configs": [
            {
                "job_name": JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{port}" for port in targets]}],
            }
        ],
    }
    with prometheus.serve(tools.PROMETHEUS[request.param](), config, directory) as port:
        wait_until(lambda: _up(port), 60, "Prometheus scraping the exporter")
        yield port


def _up(port: int) -> bool:
    try:
        return bool(prometheus.query(port, f'up{{job="{JOB}"}} == 1'))
    except OSError:
        return False


def test_every_alert_fires(
    prometheus_port: int, exporters: tuple[Exporter, Exporter, Exporter, Exporter]
) -> None:
    """Each of the chart's alerts becomes firing, on the objects that should make it fire."""

    def firing() -> dict[str, list[dict[str, str]]] | None:
        found: dict[str, list[dict[str, str]]] = {}
        for alert in prometheus.api(prometheus_port, "alerts")["alerts"]:
            if alert["state"] == "firing":
                described = {**alert["labels"], "description": alert["annotations"]["description"]}
                found.setdefault(alert["labels"]["alertname"], []).append(described)
        listing = {a["resource"] for a in found.get("KubeDraExporterListErrors", ())}
        # The list-mode exporter's errors, not only the watch-mode one's, which come first.
        missing[:] = sorted(set(ALERTS) - set(found) - set(NOT_LIVE))
        return found if not missing and "resourceclaims" in listing else None

    missing: list[str] = []
    try:
        alerts = wait_until(firing, 90, "every alert firing")
    except AssertionError as error:
        raise AssertionError(f"{error}; not firing: {missing}") from None
    assert {
        (a["namespace"], a["resourceclaim_name"]) for a in alerts["DRAResourceClaimPendingTooLong"]
    } == {
        ("families", "waiting")  # the standalone claims wait too, legitimately
    }
    assert {
        (a["resourceclaim_name"], a["request"], "(no_matching_device)" in a["description"])
        for a in alerts["DRAResourceClaimUnsatisfiable"]
    } == {
        ("scarce", "gpu", True),  # the reason is told, not a label
        ("nic-whole-wait", "nic", False),  # in_use: all 100G of a NIC with 70G left
    }
    assert {a["deviceclass_name"] for a in alerts["DRADeviceClassExhausted"]} == {
        "alerts-scarce",  # no device at all
        "alerts-nic-whole",  # its NIC has 70G left of the 100G a claim naming none takes
    }  # not alerts-nic-default: its NIC carries a share, but has room for 157 more
    assert {a["device_name"] for a in alerts["DRATaintedDeviceInUse"]} == {"lost"}
    assert "e2e-incomplete" in {a["pool"] for a in alerts["DRAResourcePoolIncomplete"]}
    assert {a["pool"] for a in alerts["DRAResourcePoolStaleGeneration"]} >= {"e2e-regen"}
    assert {a["resource"] for a in alerts["KubeDraExporterListErrors"]} >= {"resourceclaims"}
    assert {a["reason"] for a in alerts["KubeDraExporterListErrors"]} == {"Forbidden"}
    watch = f"127.0.0.1:{exporters[2].telemetry_port}"
    assert {(a["instance"], a["resource"]) for a in alerts["KubeDraExporterWatchNotSynced"]} == {
        (watch, resource) for resource in [*RESOURCES, "pods"]
    }
    assert {a["instance"] for a in alerts["KubeDraExporterWatchStale"]} == {watch}
    assert {a["pod"] for a in alerts["DRAExtendedResourceDemandPending"]} == {"ext-wait"}
    assert {(a["pod"], a["device_name"]) for a in alerts["DRAUnhealthyDeviceInUse"]} == {
        ("sick", "d")
    }
    in_stuck = [
        name for name in alerts if any(a.get("namespace") == stuck.NAMESPACE for a in alerts[name])
    ]
    assert {
        (a["resourceclaim_name"], a["device_name"]) for a in alerts["DRADeviceBindingSlow"]
    } == {("attaching", "port-0"), ("failed", "port-1")}
    descriptions = {
        a["resourceclaim_name"]: a["description"] for a in alerts["DRADeviceBindingSlow"]
    }
    assert "holds the pod attaching unbound" in descriptions["attaching"]
    assert descriptions["attaching"].endswith("Not yet True: attached.")
    assert {
        (a["resourceclaim_name"], a["device_name"], a["condition"])
        for a in alerts["DRADeviceBindingFailed"]
    } == {("failed", "port-1", "attach-failed")}
    gone = {
        (a["namespace"], a["resourceclaim_name"], a["device_name"])
        for a in alerts["DRAAllocatedDeviceGone"]
    }
    assert {g for g in gone if g[0] == stuck.NAMESPACE} == {(stuck.NAMESPACE, "gone", "port-9")}
    assert {(a["namespace"], a["pod"]) for a in alerts["DRAPodUnschedulable"]} == {
        (NAMESPACE, "orphan"),  # claim_missing; ext-wait is DRAExtendedResourceDemandPending's
        (stuck.NAMESPACE, "unheard"),  # claim_pending; attaching is placed, binding
    }
    (unprepared,) = alerts["DRAPodDevicesNotPrepared"]
    assert (unprepared["pod"], unprepared["node_name"]) == ("unprepared", stuck.NODE)
    assert unprepared["description"].endswith(f"Drivers of its claims: {stuck.NIC_DRIVER}.")
    assert "DRAResourceClaimUnsatisfiable" not in in_stuck  # the pending claim is feasible
    assert {(a["node_name"], a["driver"]) for a in alerts["DRANodePoolMissing"]} == {
        (BARE_NODE, "alerts.example.com")
    }


def test_every_dashboard_query_answers(prometheus_port: int) -> None:
    """Every panel's queries evaluate without error, and each panel has data here.

    Polled with a bound: a panel over a counter's increase has data once two scrapes of it fall
    in its window.
    """

    def empty() -> list[str]:
        found = []
        for title, panel_queries in _panels().items():
            results = [
                prometheus.query(prometheus_port, dashboard.as_run(q, JOB)) for q in panel_queries
            ]
            if not any(results):
                found.append(title)
        return found

    settled = wait_until(lambda: empty() == sorted(NEVER_EMPTY_EXCEPT), 60, "every panel answering")
    assert settled, empty()


def _panels() -> dict[str, list[str]]:
    panels: dict[str, list[str]] = {}
    for title, expr in dashboard.queries():
        panels.setdefault(title, []).append(expr)
    return panels
