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


_builds: dict[str, concurrent.futures.Future[Path]] = {}
"""The control plane's two stages, building: ``core`` (kube-apiserver, etcd, the CRDs), then
``scheduler`` (kube-scheduler and kube-controller-manager too)."""
SCHEDULED = ("test_allocator.py", "test_diagnosis.py", "test_idle_cost.py", "test_pods.py")
"""The end-to-end tests of the simulated cluster: they need the second stage."""


def start_control_plane() -> None:
    """Begin building the control plane, beside the tests that do not need it.

    Cold, its four binaries take most of the suite's time: the tests that do not need them run
    meanwhile, the end-to-end tests run last and wait for kube-apiserver and etcd
    (:func:`wait_for_control_plane`), and the simulated cluster's, last of all, for the rest.
    """
    if _builds:
        return
    pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="control-plane")
    _builds["core"] = pool.submit(_stage, ["core"], "kube-apiserver/etcd")
    _builds["scheduler"] = pool.submit(_stage, [], "kube-scheduler/kube-controller-manager")
    pool.shutdown(wait=False)


def _stage(args: list[str], what: str) -> Path:
    return Path(_last_line(["bash", str(SCRIPTS / "build-control-plane.sh"), *args], what))


def scheduled(path: str) -> bool:
    """Whether the test file at *path* runs the simulated cluster (the second stage)."""
    return path.endswith(SCHEDULED)


def wait_for_control_plane(scheduler: bool = False) -> None:
    """Wait until a stage is built, or its build has failed (the tests then say)."""
    build = _builds.get("scheduler" if scheduler else "core")
    if build is not None:
        concurrent.futures.wait([build])


def control_plane() -> Path:
    """The directory of kube-apiserver, etcd and the CRDs.

    :raises ToolUnavailable: when they cannot be built.
    """
    start_control_plane()
    return _builds["core"].result()


def scheduler_plane() -> Path:
    """The directory of :func:`control_plane` with kube-scheduler and kube-controller-manager.

    :raises ToolUnavailable: when they cannot be built.
    """
    start_control_plane()
    return _builds["scheduler"].result()


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
    "tests/e2e/": (helm, control_plane, scheduler_plane, prometheus),
}
"""Which collected tests need which tools (matched on the test file's path)."""
