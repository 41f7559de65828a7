"""Exec credential plugins within bounds: output capped, the whole group killed, orphans reaped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import CancelledError, Deferred

from kdraexp.kube.execplugin import MESSAGE_LIMIT, STDOUT_LIMIT, PluginError, run_plugin
from tests.kubeconfigs import exec_user, write_kubeconfig
from tests.processes import free_port, get, kdraexp, reaped, state, stop_pid_1, wait_for
from tests.tlsapi import serve


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def run(path: Path, timeout: float = 30.0) -> Deferred[bytes]:
    return Deferred.fromCoroutine(
        run_plugin(str(path), [path.name], {"PATH": os.environ["PATH"]}, reactor, timeout)
    )


@pytest_twisted.ensureDeferred
async def test_too_much_output(tmp_path: Path) -> None:
    """A plugin writing without end is killed past the limit."""
    plugin = script(tmp_path, "chatty", "exec yes credential\n")
    with pytest.raises(PluginError) as caught:
        await run(plugin)
    assert str(caught.value) == (
        f"exec plugin chatty wrote more than {STDOUT_LIMIT // 1024} KiB to standard output"
    )


@pytest_twisted.ensureDeferred
async def test_failure_quotes_whole_stderr_clipped(tmp_path: Path) -> None:
    """A failing plugin's message has everything it said on stderr, lines joined, clipped."""
    plugin = script(
        tmp_path,
        "login",
        "echo 'error: token expired' >&2\necho 'run: login --sso' >&2\nexit 3\n",
    )
    with pytest.raises(PluginError) as caught:
        await run(plugin)
    assert str(caught.value) == (
        "exec plugin login exited with status 3: error: token expired | run: login --sso"
    )
    noisy = script(tmp_path, "noisy", "yes 'x x x x x x x x' | head -c 200000 >&2\nexit 1\n")
    with pytest.raises(PluginError) as caught:
        await run(noisy)
    assert len(str(caught.value)) < MESSAGE_LIMIT + 60
    assert str(caught.value).endswith("...")


@pytest_twisted.ensureDeferred
async def test_deadline_kills_the_whole_group(tmp_path: Path) -> None:
    """At the deadline the plugin and the helpers it started are killed."""
    pids = tmp_path / "pids"
    plugin = script(
        tmp_path,
        "hang",
        f"sleep 300 &\necho $! >> {pids}\nsleep 300 &\necho $! >> {pids}\necho $$ >> {pids}\n"
        "wait\n",
    )
    with pytest.raises(PluginError, match="ran longer than 1s"):
        await run(plugin, timeout=1.0)
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 3
    await wait_for(lambda: all(state(pid) in (None, "Z") for pid in started), 10)


@pytest_twisted.ensureDeferred
async def test_cancelling_kills_the_whole_group(tmp_path: Path) -> None:
    """An abandoned collection cancels the plugin: its group is killed."""
    pids = tmp_path / "pids"
    plugin = script(tmp_path, "hang", f"sleep 300 &\necho $! >> {pids}\nwait\n")
    running = run(plugin)
    await wait_for(lambda: pids.exists() and pids.read_text().strip(), 10)
    running.cancel()
    with pytest.raises(CancelledError):
        await running
    helper = int(pids.read_text().split()[0])
    await wait_for(lambda: state(helper) in (None, "Z"), 10)


def unshare() -> list[str] | None:
    """A command prefix running its command as PID 1 of a new PID namespace, if allowed here."""
    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
        prefix.insert(1, "--user")
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    return prefix if probe.returncode == 0 else None


@pytest.mark.slow
@pytest.mark.skipif(unshare() is None, reason="no PID namespaces here (unshare is refused)")
@pytest_twisted.ensureDeferred
async def test_pid_1_leaves_no_zombies(tmp_path: Path) -> None:
    """The exporter as PID 1: ten plugin runs cut by the deadline leave no zombie behind."""
    plugin = script(tmp_path, "hang", "sleep 300 &\nsleep 300 &\nwait\n")
    with serve() as api:
        config = tmp_path / "kubeconfig"
        write_kubeconfig(config, api.server, api.ca_pem, exec_user(str(plugin)))
        port = free_port()
        prefix = unshare()
        assert prefix is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(config)
        with (tmp_path / "output.log").open("wb") as log:
            process = subprocess.Popen(
                [*prefix, *kdraexp("--listen", f"127.0.0.1:{port}", "--timeout", "0.5")],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            await wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz"), 30)
            for _ in range(10):
                code, body = await get(f"http://127.0.0.1:{port}/metrics")  # type: ignore[misc]
                assert code == 500 and b"Timeout" in body
            await reaped(process)
        finally:
            status = await stop_pid_1(process)
    log_text = (tmp_path / "output.log").read_text()
    assert status == 0, log_text
    assert "Running as PID 1: reaping orphaned processes" in log_text
