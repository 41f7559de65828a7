"""Rendering the chart with a real helm (see tests/tools.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.tools import helm

__all__ = ["CHART", "RenderError", "helm", "kinds", "render", "resource"]

ROOT = Path(__file__).parent.parent
CHART = ROOT / "chart" / "kube-dra-exporter"
OPERATOR = tuple(
    f"--api-versions=monitoring.coreos.com/v1/{kind}"
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule")
)
"""What a cluster with the prometheus-operator's CRDs serves, as helm template is told it."""


class RenderError(Exception):
    """helm exited non-zero; the message is its stderr."""


def render(
    values: dict[str, Any] | None = None,
    *,
    production: bool = False,
    chart: Path = CHART,
    extra: tuple[str, ...] = (),
    operator: bool = True,
    release: str = "regression",
    namespace: str = "exporter",
) -> list[dict[str, Any]]:
    """``helm template regression CHART --namespace exporter`` with *values* on stdin.

    With *operator*, for a cluster with the prometheus-operator's CRDs (the monitors and rules
    the chart makes need them).
    """
    args = [helm(), "template", release, str(chart), "--namespace", namespace, *extra]
    if operator:
        args += OPERATOR
    if production:
        args += ["-f", str(chart / "prod-values.yaml")]
    args += ["-f", "-"]
    result = subprocess.run(
        args,
        input=yaml.safe_dump(values or {}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RenderError(result.stderr)
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def resource(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one document of *kind*."""
    found = [doc for doc in docs if doc["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return [doc["kind"] for doc in docs]


def notes_chart(tmp_path: Path) -> Path:
    """A copy of the chart that renders NOTES.txt in a ConfigMap (helm template skips it)."""
    chart = tmp_path / "kube-dra-exporter"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "notes-probe.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n'
    )
    return chart
