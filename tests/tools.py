"""Tools the tests need that PyPI does not have, built from the Go module proxy.

The project's scripts build them into ~/.cache/kdraexp, so only the first build takes minutes.

They are built while the tests are collected, outside any test's timeout; the control plane,
the longest by far, is built beside the tests that do not need it, and the end-to-end tests,
run last, wait for it first. Without Go they cannot be built: in CI (CI=true) that fails the
run; elsewhere the tests needing them are skipped with one line saying why.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).parent.parent
SCRIPTS = ROOT / "scripts"
BUILD_TIMEOUT = 3600


class ToolUnavailable(Exception):
    """A tool could not be built; the message says why."""


def _last_line(args: list[str], what: str) -> str:
    try:
        built = subprocess.run(
            args, check=True, capture_output=True, text=True, timeout=BUILD_TIMEOUT
        )
    except subprocess.CalledProcessError as error:
        raise ToolUnavailable(f"cannot build {what}: {error.stderr.strip()[-300:]}") from None
    return built.stdout.strip().splitlines()[-1]


@functools.cache
def helm() -> str:
    """The helm binary: $HELM, else the one scripts/build-helm.sh builds or has cached."""
    return os.environ.get("HELM") or _last_line(["bash", str(SCRIPTS / "build-helm.sh")], "helm")


@functools.cache
def actionlint() -> str:
    """actionlint, built by scripts/go-tool.sh."""
    return _last_line(
        [
            "bash",
            str(SCRIPTS / "go-tool.sh"),
            "actionlint",
            "github.com/rhysd/actionlint/cmd/actionlint@v1.7.12",
        ],
        "actionlint",
    )


_control_plane: concurrent.futures.Future[Path] | None = None


def start_control_plane() -> None:
    """Begin building the control plane, beside the tests that do not need it.

    Cold, its four binaries take most of the suite's time: the tests that do not need them run
    meanwhile, and the end-to-end tests, run last, wait for it (:func:`wait_for_control_plane`).
    """
    global _control_plane
    if _control_plane is None:
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="control-plane")
        _control_plane = pool.submit(
            lambda: Path(
                _last_line(
                    ["bash", str(SCRIPTS / "build-control-plane.sh")],
                    "kube-apiserver/etcd/kube-scheduler/kube-controller-manager",
                )
            )
        )
        pool.shutdown(wait=False)


def wait_for_control_plane() -> None:
    """Wait until the control plane is built, or its build has failed (the tests then say)."""
    if _control_plane is not None:
        concurrent.futures.wait([_control_plane])


def control_plane() -> Path:
    """The directory of kube-apiserver, etcd, kube-scheduler, kube-controller-manager, CRDs.

    :raises ToolUnavailable: when it cannot be built.
    """
    start_control_plane()
    assert _control_plane is not None
    return _control_plane.result()


@functools.cache
def prometheus() -> Path:
    """The directory holding Debian's prometheus and promtool (installed with apt if missing)."""
    return Path(_last_line(["bash", str(SCRIPTS / "install-prometheus.sh")], "prometheus/promtool"))


NEEDS = {
    "tests/test_chart.py": (helm,),
    "tests/test_alerts.py": (helm, prometheus),
    "tests/test_dashboard.py": (helm,),
    "tests/test_image.py": (helm,),
    "tests/test_workflows.py": (actionlint,),
    "tests/e2e/": (helm, control_plane, prometheus),
}
"""Which collected tests need which tools (matched on the test file's path)."""
