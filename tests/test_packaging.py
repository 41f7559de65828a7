"""The built wheel, installed into a fresh virtualenv: twistd finds the plugin, kdraexp runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kdraexp import __version__

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent


def make_plan(target: str, venv: Path) -> str:
    """What ``make -n TARGET`` would run with the virtualenv *venv*."""
    return subprocess.run(
        ["make", "-n", target, f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def test_wheel_installs_plugin(tmp_path: Path) -> None:
    """The sdist and the wheel built from it pass ``twine check``; the wheel installs.

    Installed with its dependencies into a new venv, twistd finds the plugin there.
    """
    subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            "--outdir",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    built = sorted(path.name for path in (tmp_path / "dist").iterdir())
    assert built == [f"kdraexp-{__version__}-py3-none-any.whl", f"kdraexp-{__version__}.tar.gz"]
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "twine",
            "check",
            "--strict",
            *sorted((tmp_path / "dist").iterdir()),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2
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


def test_make_demo_installs_only_when_the_packaging_changed(tmp_path: Path) -> None:
    """The installs are file targets: a second ``make demo`` runs the exporter at once."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)

    def planned() -> str:
        return make_plan("demo", venv)

    assert "pip install" in planned()  # nothing installed yet
    (venv / ".installed-runtime").touch()
    first = planned()
    assert "pip install" not in first and "kdraexp --listen" in first
    (venv / ".installed-test").touch()  # after `make install`: the test install holds the runtime
    assert "pip install" not in planned()


def test_editable_install_is_the_checkout_on_sys_path_without_warnings(tmp_path: Path) -> None:
    """What ``make install`` and ``make demo`` install: a .pth of the checkout, said quietly.

    The checkout on sys.path is what lets twistd find the plugin under twisted/plugins (an
    import finder of setuptools' would not); setuptools' deprecated compat mode, which did it
    too, printed a banner at every install.
    """
    planned = make_plan("install", tmp_path / "venv")
    installs = [line for line in planned.splitlines() if "pip install" in line and " -e " in line]
    assert installs and not [line for line in installs if "--config-settings" in line], planned
    script = (
        "import sys, build\n"
        "print(build.ProjectBuilder(sys.argv[1]).build('editable', sys.argv[2]))\n"
    )
    built = subprocess.run(
        [sys.executable, "-W", "always", "-c", script, str(ROOT), str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "Warning" not in built.stderr and "compat" not in built.stderr.lower(), built.stderr
    import zipfile

    with zipfile.ZipFile(built.stdout.strip().splitlines()[-1]) as wheel:
        names = wheel.namelist()
        pth = [name for name in names if name.endswith(".pth")]
        assert len(pth) == 1, names
        assert wheel.read(pth[0]).decode().split() == [str(ROOT)]
        assert not [name for name in names if "finder" in name], names
