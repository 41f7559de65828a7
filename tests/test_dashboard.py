"""The chart's Grafana dashboard ConfigMap: what the sidecar finds, and every query's shape."""

from __future__ import annotations

import json
import re

from kdraexp.families import BY_NAME
from tests import dashboard
from tests.helm import render, resource

ROWS = [
    "Overview",
    "Supply and demand",
    "Utilisation",
    "Claims",
    "Why pending, and what still fits",
    "Health",
    "Cost",
    "The exporter",
]
VARIABLES = ["datasource", "job", "cluster", "driver", "model", "node", "namespace", "deviceclass"]


def test_config_map_for_the_sidecar() -> None:
    """Labelled for the Grafana sidecar, foldered, holding the dashboard file as it is."""
    docs = render(
        {
            "dashboards": {
                "enabled": True,
                "namespace": "monitoring",
                "folder": "GPU",
                "labels": {"team": "gpu"},
            }
        }
    )
    config = resource(docs, "ConfigMap")
    assert config["metadata"]["namespace"] == "monitoring"
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config["metadata"]["labels"]["team"] == "gpu"
    assert config["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert json.loads(config["data"]["kdraexp.json"]) == dashboard.load()
    assert "ConfigMap" not in {doc["kind"] for doc in render()}
    other = resource(
        render({"dashboards": {"enabled": True, "label": "dash", "labelValue": "yes"}}),
        "ConfigMap",
    )
    assert other["metadata"]["labels"]["dash"] == "yes"
    assert "annotations" not in other["metadata"]


def test_rows_and_variables() -> None:
    """The rows and variables operators look for."""
    board = dashboard.load()
    assert [p["title"] for p in board["panels"] if p["type"] == "row"] == ROWS
    assert [v["name"] for v in board["templating"]["list"]] == VARIABLES


def test_every_query_reads_known_series_of_the_job() -> None:
    """Every panel has a query; each selects the exporter's job and reads families that exist."""
    board = dashboard.load()
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert all(p.get("targets") for p in panels)
    own = {
        "kube_dra_exporter_list_duration_seconds",
        "kube_dra_exporter_list_errors_total",
        "kube_dra_exporter_list_objects",
        "kube_dra_exporter_invalid_values_total",
        "kube_dra_exporter_cel_errors_total",
        "kube_dra_exporter_http_request_duration_seconds_bucket",
        "process_resident_memory_bytes",
    }
    for title, expr in dashboard.queries(board):
        names = set(re.findall(r"\b(kube_[a-z_]+|process_[a-z_]+)\{", expr))
        assert names, title
        for name in names:
            assert name in BY_NAME or name in own, (title, name)
        assert expr.count("{") == expr.count('job="$job"'), title
