"""The memory limit and peak read by an exporter in a real memory cgroup, and a peak near it said.

The exporter serves the example cluster in a cgroup of the chart's limit (192 MiB), which the
kernel enforces: its telemetry publishes that limit and its peak, and it says nothing. Then in
a cgroup of a limit just above that peak (the peak 90% of it): it publishes that limit, says so
in one line with the figures, and lives.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_twisted

from kdraexp.telemetry.memorylimit import SIZING
from tests.processes import MemoryCgroup, free_port, get, memory_cgroup, start, stop, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parent.parent
CHART_LIMIT = 192 * 2**20
"""The chart's default memory limit."""
MIB = 2**20
SAID = re.compile(
    r"Memory: the exporter has held up to (\d+) MiB, (\d+)% of its container's (\d+) MiB limit;"
)


def sample(text: bytes, name: str) -> float | None:
    """The value of the unlabelled sample *name* in an exposition, or None."""
    found = re.search(rb"^" + name.encode() + rb" (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def own_peak(pid: int) -> int:
    """The process's own peak RSS (VmHWM), in bytes, as the kernel says from outside."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


async def served(directory: Path, cgroup: MemoryCgroup) -> tuple[float, float, str]:
    """The example cluster served and scraped in *cgroup*: its limit and peak, and its log.

    Read once the telemetry's peak is at least what the kernel says of the process after the
    scrape (it is read every few seconds).
    """
    directory.mkdir()
    port, telemetry = free_port(), free_port()
    process = start(
        [
            *("--listen", f"tcp:{port}:interface=127.0.0.1"),
            *("--telemetry-listen", f"tcp:{telemetry}:interface=127.0.0.1"),
            *("--source", f"file:{ROOT / 'examples' / 'cluster.yaml'}"),
        ],
        directory,
        cgroup=cgroup,
    )
    try:
        await wait_for(lambda: get(f"http://127.0.0.1:{port}/readyz"), 60)
        scraped = await get(f"http://127.0.0.1:{port}/metrics")
        assert scraped is not None and scraped[0] == 200, scraped
        floor = own_peak(process.pid)

        async def published() -> tuple[float, float] | None:
            answer = await get(f"http://127.0.0.1:{telemetry}/metrics")
            assert answer is not None and answer[0] == 200, answer
            limit = sample(answer[1], "kube_dra_exporter_memory_limit_bytes")
            peak = sample(answer[1], "kube_dra_exporter_memory_peak_bytes")
            return (
                (limit, peak) if limit is not None and peak is not None and peak >= floor else None
            )

        limit, peak = await wait_for(published, 60)
        assert process.poll() is None and cgroup.oom_kills() == 0
    finally:
        assert await stop(process, 30) == 0
    return limit, peak, (directory / "output.log").read_text()


@pytest.fixture
def chart_limit() -> Iterator[MemoryCgroup]:
    yield from memory_cgroup("memory-warning", CHART_LIMIT)


@pytest_twisted.ensureDeferred
async def test_the_limit_published_and_a_peak_near_it_said_once(
    tmp_path: Path, chart_limit: MemoryCgroup
) -> None:
    """In the chart's limit: published, nothing said. In one the peak fills 90% of: one line."""
    limit, peak, log = await served(tmp_path / "chart", chart_limit)
    print(f"the example cluster: peak RSS {peak / MIB:.0f} MiB")
    assert limit == CHART_LIMIT
    assert 40 * MIB < peak < 0.8 * CHART_LIMIT
    assert "Memory:" not in log
    tight = MemoryCgroup(
        f"kdraexp-memory-warning-tight-{os.getpid()}", int(peak / 0.9) // 4096 * 4096
    )
    try:
        limit, peak, log = await served(tmp_path / "tight", tight)
    finally:
        tight.remove()
    said = SAID.findall(log)
    assert len(said) == 1, log
    held, share, of = map(int, said[0])
    assert of == round(limit / MIB) and held <= round(peak / MIB)  # said when it passed
    assert 80 <= share < 100
    assert SIZING in log
