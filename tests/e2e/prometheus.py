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
