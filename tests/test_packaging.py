"""The built wheel, installed into a fresh virtualenv: twistd finds the plugin, kdraexp runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent


def test_wheel_installs_plugin(tmp_path: Path) -> None:
    """Build the wheel, install it with its dependencies into a new venv, find the plugin."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheels = list((tmp_path / "dist").glob("kdraexp-*.whl"))
    assert len(wheels) == 1
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(wheels[0])],
        check=True,
        capture_output=True,
        timeout=600,
    )
    probe = (
        "import kdraexp, twisted.plugins.kdraexp_plugin as p\n"
        "from twisted.plugin import getPlugins\n"
        "from twisted.application.service import IServiceMaker\n"
        "print(kdraexp.__file__); print(p.__file__)\n"
        "print([m.tapname for m in getPlugins(IServiceMaker) if m.tapname == 'kdraexp'])\n"
    )
    out = subprocess.run(
        [str(python), "-c", probe],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    assert out[0].startswith(purelib) and out[1].startswith(purelib)
    assert out[2] == "['kdraexp']"
    twistd = subprocess.run(
        [
            str(python),
            "-c",
            "import sys; from twisted.scripts.twistd import run; "
            "sys.argv = ['twistd', 'kdraexp', '--help']; run()",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert twistd.returncode == 0
    assert "--page-size" in twistd.stdout and "--log-format" in twistd.stdout
    command = subprocess.run(
        [str(python.parent / "kdraexp"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert command.returncode == 0, command.stderr
    assert command.stdout.startswith("Usage: kdraexp ") and "--page-size" in command.stdout
