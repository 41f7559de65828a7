"""The chart's Grafana dashboard: its panels' queries, and the queries as Prometheus runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
