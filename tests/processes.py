"""Running the installed ``kdraexp`` as a child process, without blocking the reactor."""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import treq
from twisted.internet import reactor
from twisted.internet.task import deferLater

BIN = Path(sys.executable).parent


def twistd() -> str:
    """The twistd installed beside the running Python."""
    path = BIN / "twistd"
    assert path.exists(), f"{path} is missing: install the project (pip install .)"
    return str(path)


def kdraexp(*args: str, via_twistd: bool = False) -> list[str]:
    """The installed ``kdraexp`` command line with *args*, or ``twistd -n kdraexp`` if asked.

    The telemetry listener goes to a free port of 127.0.0.1 unless *args* say where.
    """
    if not any(arg.startswith("--telemetry-listen") for arg in args):
        args = (*args, "--telemetry-listen", "tcp:0:interface=127.0.0.1")
    if via_twistd:
        return [twistd(), "-n", "--pidfile=", "kdraexp", *args]
    path = BIN / "kdraexp"
    assert path.exists(), f"{path} is missing: install the project (pip install -e .)"
    return [str(path), *args]


def free_port() -> int:
    """A port free on 127.0.0.1 right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(
    args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    via_twistd: bool = False,
    open_files: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``kdraexp ARGS`` in *cwd*, output in ``cwd/output.log``.

    *open_files* limits the files the process may open.
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    environment.update(env or {})
    with (cwd / "output.log").open("wb") as log:
        return subprocess.Popen(
            kdraexp(*args, via_twistd=via_twistd),
            cwd=cwd,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=None if open_files is None else lambda: _limit_files(open_files),
        )


def _limit_files(count: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


async def wait_for(condition: Any, limit: float = 30.0, step: float = 0.1) -> Any:
    """Poll *condition* (maybe async) on the reactor until it is truthy, at most *limit* seconds."""
    waited = 0.0
    while True:
        value = condition()
        if hasattr(value, "__await__"):
            value = await value
        if value:
            return value
        assert waited < limit, "gave up waiting"
        await deferLater(reactor, step, lambda: None)
        waited += step


async def get(url: str, **kwargs: Any) -> tuple[int, bytes] | None:
    """GET *url*; None while nothing listens."""
    from twisted.internet.error import ConnectionRefusedError

    try:
        response = await treq.get(url, **kwargs)
        return response.code, await response.content()
    except ConnectionRefusedError:
        return None


async def stop(process: subprocess.Popen[bytes], limit: float = 10.0) -> int:
    """SIGTERM the process and return its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    await wait_for(lambda: process.poll() is not None, limit)
    return int(process.returncode)
