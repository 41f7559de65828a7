"""Running the installed ``kdraexp`` as a child process, without blocking the reactor."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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


def listeners(port: int, telemetry: int) -> list[str]:
    """Arguments that serve the metrics on *port* and the exporter's own on *telemetry*."""
    return [
        *("--listen", f"tcp:{port}:interface=127.0.0.1"),
        *("--telemetry-listen", f"tcp:{telemetry}:interface=127.0.0.1"),
    ]


_GIVEN: set[int] = set()
"""The ports this process has handed out."""


def free_port() -> int:
    """A port free on 127.0.0.1 right now, and never one handed out before in this process.

    The kernel may give the port just closed again: two calls in a row once gave kube-scheduler
    and kube-controller-manager the same port, and the simulated cluster ran without one of
    them.
    """
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


class MemoryCgroup:
    """A memory cgroup of its own (v2's ``memory.max``, else v1's limit), swap included.

    A process started in it is killed by the kernel past *limit* bytes, as kubelet's container
    would be: a bound that holds only outside a cgroup is no bound.
    """

    def __init__(self, name: str, limit: int) -> None:
        v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/memory")
        if "memory" in _read(v2 / "cgroup.controllers").split():
            self.path, files = v2 / name, {"memory.max": limit, "memory.swap.max": 0}
        elif (v1 / "memory.limit_in_bytes").exists():
            self.path = v1 / name
            files = {"memory.limit_in_bytes": limit, "memory.memsw.limit_in_bytes": limit}
        else:
            raise OSError("no memory cgroup controller is mounted")
        self.path.mkdir(exist_ok=True)
        for file, value in files.items():
            if (self.path / file).exists():
                (self.path / file).write_text(str(value))

    def enter(self) -> None:
        """Move the calling process in (a child's preexec_fn)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        """Processes the kernel has killed in it for memory."""
        for name in ("memory.events", "memory.oom_control"):
            for line in _read(self.path / name).splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
        return 0

    def peak(self) -> int | None:
        """The most memory it has held, where the kernel says."""
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            text = _read(self.path / name).strip()
            if text:
                return int(text)
        return None

    def remove(self) -> None:
        """Remove it (its processes have ended)."""
        self.path.rmdir()


CHART_LIMIT = 192 * 2**20
"""The chart's default memory limit (``resources.limits.memory`` in its values.yaml)."""


def memory_cgroup(name: str, limit: int) -> Iterator[MemoryCgroup]:
    """A fixture's body: a memory cgroup of *limit* bytes, removed after.

    Skipped where cgroups cannot be made, except in CI, where that is a failure.
    """
    try:
        made = MemoryCgroup(f"kdraexp-{name}-{os.getpid()}", limit)
    except OSError as error:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no memory cgroup to run in: {error}")
    yield made
    made.remove()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


TURN_BOUND = float(os.environ.get("KDRAEXP_TEST_TURN_BOUND", "1"))
"""Seconds a turn of a started exporter's reactor may take before the test fails: generous, as a
loaded CI machine stretches every turn (a test that stalls it on purpose is marked ``stalls``)."""
_SLOW_TURN = re.compile(r"A turn of the reactor took ([0-9.]+)s")
_LOGS: dict[Path, int] = {}
"""The output of every exporter started, and how much of it :func:`turns_over` has read."""


def watch_log(path: Path) -> None:
    """Read *path*, an exporter's output, for slow turns of its reactor (from its start)."""
    _LOGS[path] = 0


def turns_over(bound: float) -> list[str]:
    """The lines of turns over *bound* seconds logged by the exporters started, since last asked."""
    found = []
    for path, read in list(_LOGS.items()):
        try:
            with path.open("rb") as output:
                output.seek(read)
                text = output.read()
        except OSError:  # removed with its test's directory
            del _LOGS[path]
            continue
        text = text[: text.rfind(b"\n") + 1]  # a line being written is read once it ends
        _LOGS[path] = read + len(text)
        for line in text.decode(errors="replace").splitlines():
            match = _SLOW_TURN.search(line)
            if match and float(match.group(1)) > bound:
                found.append(line)
    return found


def start(
    args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    via_twistd: bool = False,
    open_files: int | None = None,
    cgroup: MemoryCgroup | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``kdraexp ARGS`` in *cwd*, output in ``cwd/output.log``.

    *open_files* limits the files the process may open; *cgroup* is where it runs.
    """
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    environment.update(env or {})
    output = cwd / "output.log"
    with output.open("wb") as log:
        watch_log(output)
        return subprocess.Popen(
            kdraexp(*args, via_twistd=via_twistd),
            cwd=cwd,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: _prepare(open_files, cgroup),
        )


def _prepare(open_files: int | None, cgroup: MemoryCgroup | None) -> None:
    if open_files is not None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    if cgroup is not None:
        cgroup.enter()


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


async def ready(port: int) -> bool:
    """Whether the exporter on *port* says it is ready (``/readyz`` answers 200)."""
    answer = await get(f"http://127.0.0.1:{port}/readyz")
    return answer is not None and answer[0] == 200


async def stop(process: subprocess.Popen[bytes], limit: float = 10.0) -> int:
    """SIGTERM the process and return its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    await wait_for(lambda: process.poll() is not None, limit)
    return int(process.returncode)


def scrape_blocking(port: int, timeout: float = 60.0) -> tuple[int, bytes]:
    """One scrape of the exporter on *port*, blocking: where no reactor runs, or in a thread."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def memory(pid: int) -> dict[str, int]:
    """A process's resident memory now (``VmRSS``) and at its peak (``VmHWM``), in bytes."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmHWM", "VmRSS")):
            found[line.split(":")[0]] = int(line.split()[1]) * 1024
    return found


def reset_peak(pid: int) -> None:
    """Start a process's ``VmHWM`` over from its ``VmRSS`` now (Linux: 5 to clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def state(pid: int) -> str | None:
    """A process's state letter (Z for a zombie), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def pid_1_of(unshare_pid: int) -> int:
    """The host pid of the namespace's PID 1: unshare's only child."""
    children = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    assert len(children) == 1
    return int(children[0])


async def reaped(unshared: subprocess.Popen[bytes]) -> None:
    """Wait until the exporter, PID 1 of *unshared*'s namespace, has no zombie left."""
    exporter = pid_1_of(unshared.pid)
    await wait_for(lambda: zombies_of(exporter) == [], 20, 0.5)


async def stop_pid_1(unshared: subprocess.Popen[bytes]) -> int:
    """SIGTERM the exporter, PID 1 of *unshared*'s namespace; unshare's exit status."""
    with contextlib.suppress(OSError, AssertionError):
        os.kill(pid_1_of(unshared.pid), signal.SIGTERM)  # unshare ignores SIGTERM itself
    return await stop(unshared)


def zombies_of(pid: int) -> list[int]:
    """The children of *pid* that have ended and not been reaped."""
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in Path(f"/proc/{pid}/task/{task}/children").read_text().split():
            if state(int(child)) == "Z":
                found.append(int(child))
    return found


async def longest_turn(tmp_path: Path, file: Path, *options: str) -> tuple[float, bytes]:
    """Run the exporter on *file* with *options*, scrape, stop: its longest turn, the scrape."""
    port, out = free_port(), tmp_path / "longest"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    environment["KUBECONFIG"] = "/nonexistent"
    command = [sys.executable, "-m", "tests.turnwatch", str(out)]
    args = ["--listen", f"tcp:{port}:interface=127.0.0.1", "--source", f"file:{file}"]
    args += ["--telemetry-listen", "tcp:0:interface=127.0.0.1", *options]
    root = Path(__file__).parent.parent
    with (tmp_path / "output.log").open("wb") as log:
        process = subprocess.Popen(
            [*command, *args], cwd=root, env=environment, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        await wait_for(lambda: ready(port), limit=120)
        answer = await get(f"http://127.0.0.1:{port}/metrics")
        assert answer is not None and answer[0] == 200
    finally:
        assert await stop(process) == 0
    return float(out.read_text()), answer[1]
