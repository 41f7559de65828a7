"""A real Prometheus for the end-to-end tier: started on a config, asked through its HTTP API."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.processes import free_port


@contextmanager
def serve(binaries: Path, config: dict[str, Any], directory: Path) -> Iterator[int]:
    """Run ``prometheus`` on *config* until the block ends; yield its port."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    with (directory / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(
            [
                str(binaries / "prometheus"),
                f"--config.file={path}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def api(port: int, path: str, **params: str) -> Any:
    """GET /api/v1/PATH; the ``data`` of a successful answer.

    :raises AssertionError: on an error answer (a query that does not parse, say), with it.
    """
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as error:
        body = error.read()
        try:
            answer = json.loads(body)
        except ValueError:  # not its API answering yet (503 while it starts): try again
            raise OSError(f"Prometheus answered {error.code}: {body[:200]!r}") from None
    assert answer["status"] == "success", answer
    return answer["data"]


def query(port: int, promql: str) -> list[dict[str, Any]]:
    """An instant query's result."""
    result: list[dict[str, Any]] = api(port, "query", query=promql)["result"]
    return result


def operator_generated(
    text: str, name: str, kubeconfig: Path, rules: Path, certs: Path
) -> dict[str, Any]:
    """The Prometheus Operator's generated configuration, as a Prometheus outside a pod runs it.

    *text* is what the operator wrote for the Prometheus resource *name*: ``$(SHARD)`` and
    ``$(POD_NAME)`` filled in (shard 0, the StatefulSet's first pod), the rule files where they
    were written (*rules*), its TLS assets too (*certs*, where the pod mounts
    /etc/prometheus/certs), the cluster found through *kubeconfig* (the generated one assumes
    in-cluster), no Alertmanager (none runs).
    """
    config: dict[str, Any] = yaml.safe_load(
        text.replace("$(SHARD)", "0")
        .replace("$(POD_NAME)", f"prometheus-{name}-0")
        .replace("/etc/prometheus/certs/", f"{certs}/")
    )
    config["rule_files"] = [str(rules / "*.yaml")]
    config.pop("alerting", None)
    for scrape in config["scrape_configs"]:
        for discovery in scrape.get("kubernetes_sd_configs", ()):
            discovery["kubeconfig_file"] = str(kubeconfig)
    return config
