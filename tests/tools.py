"""Tools the tests need that PyPI does not have, built from the Go module proxy.

The project's scripts build them into ~/.cache/kdraexp, so only the first build takes minutes.

They are built while the tests are collected, outside any test's timeout; the slow ones (the
control plane, Prometheus 3) are built beside the tests that do not need them, one at a time,
and the tests that need them run last and wait for them first. Without Go they cannot be built:
in CI (CI=true) that fails the run; elsewhere the tests needing them are skipped with one line
saying why.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import subprocess
from collections.abc import Callable
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


STAGES = ("core", "prometheus3", "scheduler", "oldest", "operator", "prometheus2", "node", "image")
"""The slow builds, in the order they are made, one at a time: ``core`` (kube-apiserver, etcd,
the CRDs), ``prometheus3`` (Prometheus 3 and its promtool), ``scheduler`` (kube-scheduler,
kube-controller-manager and publish-slices), ``oldest`` (the oldest supported kube-apiserver),
``operator`` (the Prometheus Operator), then the node tier's: ``prometheus2`` (Prometheus 2.42
with Kubernetes service discovery), ``node`` (the kubelet, kube-proxy, the DRA test driver,
containerd and pause) and ``image`` (the image built from the Dockerfile). ``make prebuild``
makes them in the same order, so the two never build at once: each waits on the other's lock
and then finds the cache."""
_builds: dict[str, concurrent.futures.Future[Path]] = {}
_builder: list[concurrent.futures.ThreadPoolExecutor] = []


def start_builds(*stages: str) -> None:
    """Begin building *stages* (of :data:`STAGES`) beside the tests that do not need them.

    Cold, they take most of the suite's time: the tests that do not need them run meanwhile and
    the tests that do run last, each waiting for what it needs (:func:`wait_for`).
    """
    if not _builder:
        _builder.append(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="slow-builds"))
    for stage in STAGES:
        if stage in stages and stage not in _builds:
            _builds[stage] = _builder[0].submit(_BUILD[stage])


def _stage(args: list[str], what: str) -> Path:
    return Path(_last_line(["bash", str(SCRIPTS / "build-control-plane.sh"), *args], what))


def _prometheus3() -> Path:
    return Path(_last_line(["bash", str(SCRIPTS / "build-prometheus.sh")], "Prometheus 3"))


def _prometheus2() -> Path:
    node_host()
    return Path(
        _last_line(
            ["bash", str(SCRIPTS / "build-prometheus.sh"), "tools/prometheus2"], "Prometheus 2.42"
        )
    )


def _operator() -> Path:
    return Path(
        _last_line(["bash", str(SCRIPTS / "build-prometheus-operator.sh")], "prometheus-operator")
    )


def _oldest() -> Path:
    return Path(
        _last_line(["bash", str(SCRIPTS / "build-oldest-server.sh")], "the oldest kube-apiserver")
    )


def node_host() -> None:
    """Check that this host can run a node: root, and cgroups with a memory controller.

    :raises ToolUnavailable: saying what is missing.
    """
    if os.geteuid() != 0:
        raise ToolUnavailable("a node (kubelet, containerd, iptables, cgroups) needs root")
    cgroups = Path("/sys/fs/cgroup")
    unified = cgroups / "cgroup.controllers"
    has_v2 = unified.exists() and "memory" in unified.read_text().split()
    if not has_v2 and not (cgroups / "memory" / "memory.limit_in_bytes").exists():
        raise ToolUnavailable("a node needs cgroups with a memory controller, and none is mounted")


def _node() -> Path:
    node_host()
    return Path(
        _last_line(
            ["bash", str(SCRIPTS / "build-node.sh")], "the kubelet, kube-proxy and containerd"
        )
    )


def _image() -> Path:
    node_host()
    return Path(_last_line(["bash", str(SCRIPTS / "build-node-image.sh")], "the image"))


_BUILD: dict[str, Callable[[], Path]] = {
    "core": functools.partial(_stage, ["core"], "kube-apiserver/etcd"),
    "prometheus3": _prometheus3,
    "scheduler": functools.partial(_stage, [], "kube-scheduler/kube-controller-manager"),
    "oldest": _oldest,
    "operator": _operator,
    "prometheus2": _prometheus2,
    "node": _node,
    "image": _image,
}


def wait_for(*stages: str) -> None:
    """Wait until each of *stages* is built, or its build has failed (the tests then say)."""
    concurrent.futures.wait([_builds[stage] for stage in stages if stage in _builds])


def _built(stage: str) -> Path:
    start_builds(stage)
    return _builds[stage].result()


def control_plane() -> Path:
    """The directory of kube-apiserver, etcd and the CRDs.

    :raises ToolUnavailable: when they cannot be built.
    """
    return _built("core")


def scheduler_plane() -> Path:
    """The directory of :func:`control_plane`, with the simulated cluster's binaries too.

    kube-scheduler, kube-controller-manager and publish-slices (tools/control-plane/publish-slices:
    slices published as a DRA driver publishes them).

    :raises ToolUnavailable: when they cannot be built.
    """
    return _built("scheduler")


def prometheus3() -> Path:
    """The directory of Prometheus 3 and its promtool, built by scripts/build-prometheus.sh.

    :raises ToolUnavailable: when they cannot be built.
    """
    return _built("prometheus3")


def oldest_server() -> Path:
    """The directory of the oldest kube-apiserver supported (tools/oldest-server pins it).

    :raises ToolUnavailable: when it cannot be built.
    """
    return _built("oldest")


@functools.cache
def prometheus() -> Path:
    """The directory holding Debian's prometheus and promtool (installed with apt if missing)."""
    return Path(_last_line(["bash", str(SCRIPTS / "install-prometheus.sh")], "prometheus/promtool"))


def promtool(
    binaries: Path, *args: str, directory: Path | None = None, given: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``promtool`` of *binaries* with *args*, in *directory*, *given* on its input."""
    return subprocess.run(
        [str(binaries / "promtool"), *args],
        cwd=directory,
        input=given,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def lint(binaries: Path, exposition: str) -> list[str]:
    """What ``promtool check metrics`` of *binaries* says of *exposition*, a line each."""
    checked = promtool(binaries, "check", "metrics", given=exposition)
    return [line for line in (checked.stdout + checked.stderr).splitlines() if line.strip()]


def prometheus_operator() -> Path:
    """The directory of the Prometheus Operator and its CRDs (scripts/build-prometheus-operator.sh).

    :raises ToolUnavailable: when they cannot be built.
    """
    return _built("operator")


def prometheus2() -> Path:
    """The directory of Prometheus 2.42 built from its Go module, with Kubernetes discovery.

    Debian's 2.42 (:func:`prometheus`) is built without it; the node tier's Prometheus finds
    its targets as kube-prometheus-stack's does.

    :raises ToolUnavailable: when it cannot be built, or this host cannot run the node tier.
    """
    return _built("prometheus2")


def node_binaries() -> Path:
    """The directory of the node's binaries, built by scripts/build-node.sh.

    The kubelet, kube-proxy, the DRA test driver, containerd (with its runc shim and ctr) and
    pause.

    :raises ToolUnavailable: when they cannot be built, or this host cannot run them.
    """
    return _built("node")


def node_images() -> Path:
    """The directory of the images the node runs, built by scripts/build-node-image.sh.

    The image built from the Dockerfile and pause, as docker archives.

    :raises ToolUnavailable: when it cannot be built, or this host cannot run it.
    """
    return _built("image")


SCHEDULED = (
    "test_allocator.py",
    "test_chargeback.py",
    "test_diagnosis.py",
    "test_eviction.py",
    "test_idle_cost.py",
    "test_judges.py",
    "test_node_view.py",
    "test_pods.py",
    "test_publisher.py",
)
"""The end-to-end tests of the simulated cluster: they need kube-scheduler and the controller
manager (and one of them publish-slices, built with them)."""
PROMETHEUS: dict[str, Callable[[], Path]] = {"2.42": prometheus, "3.16": prometheus3}
"""The Prometheus releases the rules and the dashboard are checked on: Debian's package (2.42 in
bookworm) and the one built from its Go module (the release kube-prometheus-stack users run is a
3.x); a test checks that each says it is that release."""

NEEDS = {
    "tests/test_chart.py": (helm,),
    "tests/test_alerts.py": (helm, prometheus, prometheus3),
    "tests/test_dashboard.py": (helm, prometheus, prometheus3),
    "tests/test_exposition_lint.py": (prometheus, prometheus3),
    "tests/test_image.py": (helm,),
    "tests/test_workflows.py": (actionlint,),
    "tests/e2e/": (helm, control_plane),
    "tests/e2e/test_prometheus.py": (prometheus, prometheus3),
    "tests/e2e/test_rules.py": (prometheus, prometheus3),
    "tests/e2e/test_operator.py": (prometheus3, prometheus_operator, prometheus2),
    "tests/e2e/test_oldest_server.py": (oldest_server,),
    **{f"tests/e2e/{name}": (scheduler_plane,) for name in SCHEDULED},
    "tests/node/": (node_host, helm, control_plane, scheduler_plane, node_binaries, node_images),
    "tests/node/test_discovered.py": (prometheus3, prometheus2, prometheus_operator),
}
"""Which collected tests need which tools (matched on the test file's path; several may match)."""
BACKGROUND = {
    control_plane: "core",
    prometheus3: "prometheus3",
    scheduler_plane: "scheduler",
    oldest_server: "oldest",
    prometheus_operator: "operator",
    prometheus2: "prometheus2",
    node_binaries: "node",
    node_images: "image",
}
"""The tools built beside the tests (:func:`start_builds`), by their stage."""


def stages(path: str) -> list[str]:
    """The background stages the test file at *path* needs, in build order.

    None for the node tier where this host cannot run a node: its tests are skipped, and
    nothing is built for them.
    """
    if "tests/node/" in path:
        try:
            node_host()
        except ToolUnavailable:
            return []
    needed = {
        BACKGROUND[build]
        for fragment, builders in NEEDS.items()
        if fragment in path
        for build in builders
        if build in BACKGROUND
    }
    return [stage for stage in STAGES if stage in needed]
