"""A hostile API server cannot exhaust the exporter's memory: measured on the running process.

A raw socket server answers every list with one misbehaviour: a body that never ends, a body
larger than the limit, a gzip bomb, endless headers.  The exporter must fail the scrape with a
clear reason, keep its peak memory within a measured bound, drop the connection, and answer the
next scrape.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.hostile import Hostile, slices
from tests.kubeconfigs import write_kubeconfig
from tests.processes import (
    CHART_LIMIT,
    MemoryCgroup,
    free_port,
    memory,
    memory_cgroup,
    reset_peak,
    scrape_blocking,
    start,
)

pytestmark = pytest.mark.slow
LIMIT = 16 * 2**20
"""--max-response-bytes in these tests."""
CGROUP_LIMIT = 128 * 2**20
"""The memory cgroup the exporter runs in: what is bounded must stay bounded there."""
BOUND = 2 * LIMIT + 24 * 2**20
"""What a hostile answer may add to the exporter's peak memory: the two lists read in parallel
(slices and claims) may each hold up to the limit, and some room."""


@pytest.fixture(scope="module")
def hostile() -> Iterator[Hostile]:
    server = Hostile()
    yield server
    server.close()


@pytest.fixture(scope="module")
def cgroup() -> Iterator[MemoryCgroup]:
    yield from memory_cgroup("hostile", CGROUP_LIMIT)


@pytest.fixture(scope="module")
def exporter(
    hostile: Hostile, cgroup: MemoryCgroup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, int]]:
    yield from _exporter(
        hostile, cgroup, tmp_path_factory.mktemp("hostile"), ["--max-response-bytes", str(LIMIT)]
    )


def _exporter(
    hostile: Hostile, cgroup: MemoryCgroup, directory: Path, args: list[str], ready: bool = True
) -> Generator[tuple[int, int], None, None]:
    """An exporter reading *hostile*, run in *cgroup*: its port and pid.

    Given once a scrape answers 200 (unless not *ready*: once /healthz does).
    """
    config = write_kubeconfig(
        directory / "kubeconfig", f"http://127.0.0.1:{hostile.port}", None, {}
    )
    port = free_port()
    process = start(
        [
            "--listen",
            f"tcp:{port}:interface=127.0.0.1",
            "--timeout",
            "3",
            *args,
        ],
        directory,
        {"KUBECONFIG": str(config)},
        cgroup=cgroup,
    )
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                if ready and scrape_blocking(port)[0] == 200:
                    break
                if not ready:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=60):
                        break
            except OSError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (
                directory / "output.log"
            ).read_text()
            time.sleep(0.2)
        assert cgroup.path.name in Path(f"/proc/{process.pid}/cgroup").read_text()
        yield port, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize(
    ("behaviour", "line"),
    [
        ("endless", b"list deviceclasses failed: Timeout: not complete within 3s"),
        ("huge", b"list deviceclasses failed: TooLarge: the response is larger than"),
        ("bomb", b"list deviceclasses failed: TooLarge: the response is larger than"),
        ("headers", b"list deviceclasses failed: Transport"),
        ("line", b"list deviceclasses failed: Transport"),
    ],
)
def test_bounded_and_still_serving(
    hostile: Hostile,
    cgroup: MemoryCgroup,
    exporter: tuple[int, int],
    behaviour: str,
    line: bytes,
) -> None:
    """The scrape fails with a reason, the peak memory stays bounded, the next scrape works.

    All of it in a 128 MiB memory cgroup, which the kernel enforces: no process was killed.
    """
    port, pid = exporter
    reset_peak(pid)
    before = memory(pid)
    hostile.behaviour = behaviour
    code, body = scrape_blocking(port)
    assert code == 500 and body.startswith(line), body
    time.sleep(1.5)  # an endless body would keep arriving meanwhile
    after = memory(pid)
    assert after["VmHWM"] - before["VmRSS"] < BOUND, (before, after)
    assert after["VmRSS"] - before["VmRSS"] < BOUND, (before, after)
    hostile.behaviour = "ok"
    assert scrape_blocking(port)[0] == 200
    assert cgroup.oom_kills() == 0
    peak = cgroup.peak()
    assert peak is None or peak <= CGROUP_LIMIT


@pytest.fixture(scope="module")
def chart_cgroup() -> Iterator[MemoryCgroup]:
    yield from memory_cgroup("chart-limit", CHART_LIMIT)


@pytest.fixture(scope="module")
def defaulted(
    hostile: Hostile, chart_cgroup: MemoryCgroup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, int]]:
    yield from _exporter(hostile, chart_cgroup, tmp_path_factory.mktemp("defaulted"), [])


@pytest.mark.parametrize("behaviour", ["big", "huge", "bomb"])
def test_default_cap_fits_the_chart_memory_limit(
    hostile: Hostile, chart_cgroup: MemoryCgroup, defaulted: tuple[int, int], behaviour: str
) -> None:
    """Without --max-response-bytes, a 200 or 500 MiB body or a 1 GiB gzip bomb fails the list.

    TooLarge at the default 64 MiB, in the chart's default 192 MiB limit: no OOM kill (with the
    256 MiB default of before, the kernel killed the exporter).
    """
    port, _ = defaulted
    hostile.behaviour = behaviour
    code, body = scrape_blocking(port)
    hostile.behaviour = "ok"
    assert code == 500, body
    assert b"TooLarge: the response is larger than --max-response-bytes=67108864" in body, body
    assert scrape_blocking(port)[0] == 200
    assert chart_cgroup.oom_kills() == 0


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        (
            "bare",
            b"list resourceslices failed: TooLarge: a page of resourceslices holds more than "
            b"65536 devices",
        ),
        (
            "fat",
            b"list resourceslices failed: TooLarge: ResourceSlice s0 is 18",
        ),
    ],
)
def test_what_a_response_becomes_fits_the_chart_memory_limit(
    hostile: Hostile,
    chart_cgroup: MemoryCgroup,
    defaulted: tuple[int, int],
    behaviour: str,
    said: bytes,
) -> None:
    """Few bytes that become much fail the list before they take the memory limit.

    256,000 bare devices in 5 MB, or one 18 MB slice, are within the 64 MiB response cap; read,
    such answers took the exporter to 283-334 MB, past the chart's 192 MiB.  Now the list fails
    with TooLarge naming what was too large, and nothing is killed; asked again, it fails again
    (what the tries before read was kept for the next: the fourth got 256,000 devices through,
    at 270 MB).
    """
    port, pid = defaulted
    reset_peak(pid)
    before = memory(pid)
    hostile.behaviour = behaviour
    try:
        for _ in range(4):
            code, body = scrape_blocking(port)
            assert code == 500, body
            assert said in body, body
    finally:
        hostile.behaviour = "ok"
    assert memory(pid)["VmHWM"] - before["VmRSS"] < 64 * 2**20
    assert scrape_blocking(port)[0] == 200
    assert chart_cgroup.oom_kills() == 0


@pytest.fixture(scope="module")
def with_pods(
    hostile: Hostile, chart_cgroup: MemoryCgroup, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[int, int]]:
    """An exporter with the Pod view, in the chart's memory limit."""
    yield from _exporter(
        hostile,
        chart_cgroup,
        tmp_path_factory.mktemp("with-pods"),
        ["--resources", "resourceclaims,resourceslices,deviceclasses,pods"],
    )


def test_a_list_that_keeps_failing_keeps_memory_flat(
    hostile: Hostile, chart_cgroup: MemoryCgroup, with_pods: tuple[int, int]
) -> None:
    """Pods refused at every scrape while 3,000 new claims come each time: memory stays flat.

    Every scrape answers 500 for the pods, as it should; what the claims' lists read is kept
    for the next collection, replacing what the one before kept (every attempt's was kept: 4.8
    MiB a scrape, the chart's limit reached), and what a failed collection held goes with it
    (its failures' tracebacks held it in cycles until the collector's rare full pass, 5 MiB a
    scrape, 131 MiB after 13 scrapes).
    """
    port, pid = with_pods
    hostile.behaviour = "churn"
    try:
        sizes = []
        for _ in range(30):
            code, body = scrape_blocking(port)
            assert code == 500 and b"list pods failed: 403 Forbidden" in body, body
            sizes.append(memory(pid)["VmRSS"])
    finally:
        hostile.behaviour = "ok"
    assert hostile.lists >= 30
    grown = max(sizes[4:]) - sizes[4]  # not only in the end: the collector's rare full pass
    assert grown < 8 * 2**20, [size // 2**20 for size in sizes]
    assert scrape_blocking(port)[0] == 200
    assert chart_cgroup.oom_kills() == 0


@pytest.fixture
def alone_in_the_chart_limit() -> Iterator[MemoryCgroup]:
    """The chart's memory limit for one exporter alone."""
    yield from memory_cgroup("chart-limit-alone", CHART_LIMIT)


def test_a_huge_object_in_a_file_is_refused_before_it_is_read(
    alone_in_the_chart_limit: MemoryCgroup, tmp_path: Path
) -> None:
    """A 50 MB --source file holding one 46 MB slice is refused without being decoded.

    Within the 64 MiB cap, the file is read; its one slice, decoded whole before the reader
    refused it, took the exporter to 545 MiB (killed in the chart's 192 MiB), and the file was
    held twice while it was read.  It is refused by its size first, as a list's object is: 114
    MiB at the peak, the file's 50 MB with it.
    """
    device = {
        "attributes": {
            "uuid": {"string": "GPU-000000000000-aaaa-bbbb-cccc"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
    one = json.loads(slices(1, [])).get("items")[0]
    one.update({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"})
    one["spec"]["devices"] = [{"name": f"gpu-{i}", **device} for i in range(300_000)]
    dump = tmp_path / "cluster.json"
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [one]}))
    assert dump.stat().st_size > 40 * 2**20
    port = free_port()
    process = start(
        ["--listen", f"tcp:{port}:interface=127.0.0.1", "--source", f"file:{dump}"],
        tmp_path,
        cgroup=alone_in_the_chart_limit,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                code, body = scrape_blocking(port)
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.2)
        assert code == 500, body
        assert b"TooLarge: ResourceSlice s0 is " in body, body
        assert memory(process.pid)["VmHWM"] < 140 * 2**20
        assert alone_in_the_chart_limit.oom_kills() == 0
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.parametrize("mode", ["list", "watch"])
@pytest.mark.parametrize(
    ("behaviour", "answered"),
    [("fat_pods", 200), ("huge_pod", 500)],
)
def test_pages_of_large_pods_fit_the_chart_memory_limit(
    hostile: Hostile,
    alone_in_the_chart_limit: MemoryCgroup,
    tmp_path: Path,
    mode: str,
    behaviour: str,
    answered: int,
) -> None:
    """Pods of megabytes, with the Pod view, in list and watch mode, in the chart's 192 MiB.

    A page of 18 pods of 3.2 MB each is read, each pod decoded and dropped in turn (peak 139-140
    MiB, one page and one pod decoded at a time); a 58 MB pod is refused unread (TooLarge) and
    what it was read with goes with the failed list (peak 125-126 MiB).  In watch mode the
    failure was kept with its traceback, whose frames held the refused page until the watch
    was current again: 132 MiB between lists, 190 MiB while the next list read it again.
    """
    hostile.behaviour = behaviour
    args = ["--mode", mode, "--resources", "resourceclaims,resourceslices,deviceclasses,pods"]
    running = _exporter(hostile, alone_in_the_chart_limit, tmp_path, args, answered == 200)
    try:
        port, pid = next(running)
        if answered == 200:
            code, body = scrape_blocking(port)
            assert code == 200, body
        elif mode == "list":
            code, body = scrape_blocking(port)
            assert code == 500 and b"TooLarge: Pod p0 is " in body, body
        else:  # refused twice: what the first refusal read would sit beside the second's
            deadline = time.monotonic() + 30
            while (tmp_path / "output.log").read_text().count("TooLarge: Pod p0 is ") < 2:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        deadline = time.monotonic() + 20  # watch mode lists again meanwhile: between two
        while memory(pid)["VmRSS"] >= 110 * 2**20:  # lists, what the last one read is gone
            assert time.monotonic() < deadline, memory(pid)
            time.sleep(0.05)
        assert memory(pid)["VmHWM"] < 176 * 2**20, memory(pid)
        assert alone_in_the_chart_limit.oom_kills() == 0
    finally:
        running.close()
        hostile.behaviour = "ok"
