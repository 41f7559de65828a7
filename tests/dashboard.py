"""The chart's Grafana dashboard: its panels' queries, and the queries as Prometheus runs them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests import tools

DASHBOARD = (
    Path(__file__).parent.parent / "chart" / "kube-dra-exporter" / "dashboards" / "kdraexp.json"
)
GRAFANA_SCRAPE_INTERVAL = 30
"""Seconds: the scrape interval kube-prometheus-stack's Grafana data source assumes
(``timeInterval: 30s``), which makes ``$__rate_interval`` four times it, 2m, over the ranges a
dashboard is usually looked at (Grafana: max($__interval + scrape interval, 4 x scrape
interval))."""
SUBSTITUTIONS = {
    "$__rate_interval": f"{4 * GRAFANA_SCRAPE_INTERVAL}s",
    "$__range": "1h",
    "$job": "kdraexp",
}
"""What Grafana puts for its own variables; the dashboard's variables with "All" chosen take
their ``allValue``."""


def load() -> dict[str, Any]:
    """The dashboard JSON."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def queries(dashboard: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    found = []
    for panel in (dashboard or load())["panels"]:
        for target in panel.get("targets", ()):
            found.append((panel["title"], target["expr"]))
    return found


def as_run(expr: str, job: str = "kdraexp") -> str:
    """*expr* with the dashboard's variables replaced as Grafana does with "All" chosen."""
    for name, value in {**SUBSTITUTIONS, "$job": job}.items():
        expr = expr.replace(name, value)
    for variable in load()["templating"]["list"]:
        if variable.get("includeAll"):
            expr = expr.replace(f"${variable['name']}", variable["allValue"])
    return expr


def installed(job: str, currency: str, runbooks: str) -> dict[str, Any]:
    """The dashboard with its import inputs filled in, as the chart's ConfigMap holds it."""
    text = DASHBOARD.read_text()
    for name, value in {
        "VAR_JOB": job,
        "VAR_CURRENCY": currency,
        "VAR_RUNBOOK_URL": runbooks,
        "DS_PROMETHEUS": "prometheus",
    }.items():
        text = text.replace("${" + name + "}", value)
    board: dict[str, Any] = json.loads(text)
    return board


def panel(title: str) -> dict[str, Any]:
    """The panel of that title."""
    found: dict[str, Any] = next(p for p in load()["panels"] if p["title"] == title)
    return found


def series_of(exposition: str, job: str = "kdraexp") -> dict[str, float]:
    """Each sample of an exposition as a series name for ``promtool test rules``, with *job*."""
    found = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            labels = {"job": job, **sample.labels}
            text = ",".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in labels.items())
            found[f"{sample.name}{{{text}}}"] = sample.value
    return found


def evaluate(
    binaries: Path, directory: Path, series: dict[str, str], cases: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    """Run ``promtool test rules`` of *binaries* on *series*, one sample a minute, and *cases*.

    *series* maps a series to its values in promtool's notation (``5x3``, ``0+60x10``); *cases*
    are ``promql_expr_test`` entries.
    """
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": v} for name, v in series.items()],
                "promql_expr_test": cases,
            }
        ],
    }
    return promtool(binaries, directory, tests)


def promtool(
    binaries: Path, directory: Path, tests: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """Run ``promtool test rules`` of *binaries* on *tests*, a rule-test file with no rules."""
    (directory / "panel.test.yaml").write_text(yaml.safe_dump(tests))
    return tools.promtool(binaries, "test", "rules", "panel.test.yaml", directory=directory)
