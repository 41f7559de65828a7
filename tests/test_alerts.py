"""The chart's PrometheusRule: valid for promtool, each alert proven by promtool unit tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import tools
from tests.helm import RenderError, render, resource

RULE_TESTS = Path(__file__).parent / "rules" / "alerts.test.yaml"
ALERTS = (
    "DRAResourceClaimPendingTooLong",
    "DRAResourceClaimUnsatisfiable",
    "DRAResourceClaimAllocatedUnreserved",
    "DRAClaimDeviceNotReady",
    "DRADeviceBindingSlow",
    "DRADeviceBindingFailed",
    "DRAAllocatedDeviceGone",
    "DRADeviceTainted",
    "DRATaintedDeviceInUse",
    "DRADeviceClassExhausted",
    "DRAExtendedResourceDemandPending",
    "DRAUnhealthyDeviceInUse",
    "DRAPodUnschedulable",
    "DRAPodDevicesNotPrepared",
    "DRAResourcePoolIncomplete",
    "DRAResourcePoolStaleGeneration",
    "DRANodePoolMissing",
    "KubeDraExporterDown",
    "KubeDraExporterListErrors",
    "KubeDraExporterWatchNotSynced",
    "KubeDraExporterWatchStale",
    "KubeDraExporterSlowCollections",
    "KubeDraExporterMemoryNearLimit",
    "KubeDraExporterCertificateExpiring",
    "KubeDraExporterCertificateReloadFailing",
)
RUNBOOKS = "https://runbooks.example/alerts.md"
"""The runbook URL the promtool tests expect (the default follows the release)."""
ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs" / "alerts.md"


def rules(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rendered PrometheusRule's spec (its groups)."""
    values = {"prometheusRule": {"enabled": True, **(values or {})}}
    spec: dict[str, Any] = resource(render(values), "PrometheusRule")["spec"]
    return spec


def test_rules_check_and_unit_tests(prometheus_release: Path, tmp_path: Path) -> None:
    """promtool check rules accepts them, and every alert's unit tests pass, on each release."""
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules({"runbookURL": RUNBOOKS})))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    checked = tools.promtool(prometheus_release, "check", "rules", "rules.yaml", directory=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 29 rules found" in checked.stdout
    tested = tools.promtool(
        prometheus_release, "test", "rules", RULE_TESTS.name, directory=tmp_path
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize("release", sorted(tools.PROMETHEUS))
def test_prometheus_releases_are_the_ones_named(release: str) -> None:
    """Each Prometheus the rules are checked on says it is the release the tests name."""
    binaries = tools.PROMETHEUS[release]()
    for command in ("prometheus", "promtool"):
        said = subprocess.run(
            [str(binaries / command), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        assert (said.stdout + said.stderr).startswith(f"{command}, version {release}."), said


def test_every_alert_tested_and_documented() -> None:
    """Each alert has firing cases in the unit tests and a section in docs/alerts.md."""
    rendered = [rule["alert"] for g in rules()["groups"] for rule in g["rules"] if "alert" in rule]
    assert sorted(rendered) == sorted(ALERTS)
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", ())
        if check["exp_alerts"]
    }
    assert fired == set(ALERTS)
    headings = {
        line[4:].strip() for line in DOCS.read_text().splitlines() if line.startswith("### ")
    }
    assert set(ALERTS) <= headings


def test_runbook_commands_name_what_the_readme_installs() -> None:
    """The runbooks' kubectl commands name objects that the README's install command makes.

    The install from a checkout is rendered with its release name, namespace and values file;
    each ``deploy/NAME``, ``servicemonitor NAME`` and ``-l app.kubernetes.io/name=NAME`` of a
    ``kubectl -n NAMESPACE`` command must be one of its objects in that namespace.
    """
    readme = (ROOT / "README.md").read_text()
    install = re.search(
        r"helm upgrade --install (\S+) chart/kube-dra-exporter \\\n"
        r"\s+--namespace (\S+) --create-namespace -f (\S+)\n",
        readme,
    )
    assert install is not None, "the README's install from a checkout is not found"
    release, namespace, values = install.groups()
    docs = render(release=release, namespace=namespace, extra=("-f", str(ROOT / values)))
    made = {
        (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"]): doc
        for doc in docs
    }
    checked = []
    for where, command in re.findall(r"kubectl -n (\S+) ([^`\n]*)", DOCS.read_text()):
        for kind, pattern in (
            ("Deployment", r"deploy/(\S+)"),
            ("ServiceMonitor", r"servicemonitor (\S+)"),
        ):
            for name in re.findall(pattern, command):
                assert (kind, where, name) in made, f"kubectl -n {where} {command}"
                checked.append(name)
        for name in re.findall(r"-l app\.kubernetes\.io/name=(\S+)", command):
            pods = [
                doc["spec"]["template"]["metadata"]["labels"]
                for (kind, namespace, _), doc in made.items()
                if kind == "Deployment" and namespace == where
            ]
            assert [labels["app.kubernetes.io/name"] for labels in pods] == [name], command
            checked.append(name)
    assert len(checked) >= 5, checked


def test_values_shape_the_rules() -> None:
    """The job selector, thresholds, for, severity, labels; a disabled alert and empty group go."""
    alerts = {
        "DRAResourceClaimPendingTooLong": {
            "threshold": 120,
            "for": "1m",
            "severity": "critical",
            "additionalLabels": {"team": "gpu"},
        },
        "DRAResourcePoolIncomplete": {"enabled": False},
        "DRAResourcePoolStaleGeneration": {"enabled": False},
        "DRANodePoolMissing": {"enabled": False},
    }
    spec = rules({"job": "dra", "alerts": alerts, "recordingRules": False})
    groups = {g["name"]: g["rules"] for g in spec["groups"]}
    assert sorted(groups) == [
        "kdraexp.claims",
        "kdraexp.devices",
        "kdraexp.exporter",
        "kdraexp.pods",
    ]
    pending = groups["kdraexp.claims"][0]
    assert pending["alert"] == "DRAResourceClaimPendingTooLong"
    assert pending["expr"].rstrip().endswith("> 120")
    assert (pending["for"], pending["labels"]) == ("1m", {"severity": "critical", "team": "gpu"})
    for group in groups.values():
        for rule in group:
            assert 'job="dra"' in rule["expr"] and 'job="kube-dra-exporter"' not in rule["expr"]
            assert rule["annotations"]["runbook_url"].endswith("#" + rule["alert"].lower())


def test_binding_threshold_and_window_shape_the_rules() -> None:
    """The seconds a device may bind, and how far back a failure seen fires, are values."""
    alerts = {
        "DRADeviceBindingSlow": {"threshold": 120},
        "DRADeviceBindingFailed": {"window": "30m"},
        "DRAPodDevicesNotPrepared": {"threshold": 900},
    }
    exprs = {
        rule["alert"]: rule["expr"]
        for group in rules({"alerts": alerts})["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    assert exprs["DRADeviceBindingSlow"].rstrip().endswith("> 120")
    assert "kube_resourceclaim_allocation_binding_failed{" in exprs["DRADeviceBindingFailed"]
    assert "[30m])" in exprs["DRADeviceBindingFailed"]
    assert exprs["DRAPodDevicesNotPrepared"].rstrip().endswith("> 900")
    with pytest.raises(RenderError) as caught:
        rules({"alerts": {"DRADeviceBindingFailed": {"window": "0"}}})
    assert "/DRADeviceBindingFailed/window" in str(caught.value)


def test_job_and_runbooks_follow_the_chart() -> None:
    """Unset, the job is the chart's name (nameOverride too) and runbooks are this release's."""
    from kdraexp import __version__

    for values, job in (
        ({}, "kube-dra-exporter"),
        ({"nameOverride": "gpu-metrics"}, "gpu-metrics"),
    ):
        docs = render({"prometheusRule": {"enabled": True}, **values})
        spec = resource(docs, "PrometheusRule")["spec"]
        for group in spec["groups"]:
            for rule in group["rules"]:
                assert rule["expr"].count("job=") == rule["expr"].count(f'job="{job}"') > 0
                if "alert" in rule:
                    assert rule["annotations"]["runbook_url"] == (
                        "https://github.com/gradiant/kube-dra-exporter/blob/"
                        f"v{__version__}/docs/alerts.md#{rule['alert'].lower()}"
                    )


def test_rule_object() -> None:
    """Namespace and labels of the PrometheusRule; nothing without prometheusRule.enabled."""
    docs = render(
        {"prometheusRule": {"enabled": True, "namespace": "monitoring", "labels": {"release": "k"}}}
    )
    rule = resource(docs, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "k"
    assert "PrometheusRule" not in {doc["kind"] for doc in render()}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"alerts": {"DRANope": {"enabled": True}}}, "additional properties 'DRANope'"),
        ({"alerts": {"DRADeviceTainted": {"for": "soon"}}}, "/DRADeviceTainted/for"),
        ({"job": 'a"b'}, "/prometheusRule/job"),
    ],
)
def test_schema(values: dict[str, Any], message: str) -> None:
    """Typos and malformed durations fail helm with the path."""
    with pytest.raises(RenderError) as caught:
        render({"prometheusRule": {"enabled": True, **values}})
    assert message in str(caught.value)
