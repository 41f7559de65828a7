"""The memory limit read from a cgroup (v2, v1, a container's own), the peak, and a warning."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent

from kdraexp.telemetry.memorylimit import LOOK, SIZING, MemoryWatch
from kdraexp.telemetry.selfmetrics import registry
from kdraexp.util.cgroup import MemoryCgroup
from kdraexp.util.peakrss import peak_rss

MIB = 2**20
LIMIT = "kube_dra_exporter_memory_limit_bytes"
PEAK = "kube_dra_exporter_memory_peak_bytes"
V1_UNLIMITED = "9223372036854771712"
"""What cgroup v1 writes in memory.limit_in_bytes when nothing limits it (on 4 KiB pages)."""


def write(directory: Path, **files: str) -> Path:
    """*files* (the first underscore of each name written as a dot) in *directory*."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".", 1)).write_text(text + "\n")
    return directory


def v2(tmp_path: Path, own: str = "/kubepods/pod-a/c1") -> tuple[Path, Path]:
    """A cgroup v2 mount under *tmp_path* and a /proc/self/cgroup naming *own* in it."""
    root = write(tmp_path / "fs", cgroup_controllers="cpuset cpu io memory pids")
    (tmp_path / "self").write_text(f"0::{own}\n")
    return root, tmp_path / "self"


def test_v2_the_own_cgroup_and_the_smallest_limit_above_it(tmp_path: Path) -> None:
    """The container's limit; a pod's smaller limit above it wins; ``max`` is none."""
    root, own = v2(tmp_path)
    write(root / "kubepods", memory_max="max")
    pod = write(root / "kubepods" / "pod-a", memory_max=str(160 * MIB))
    container = write(root / "kubepods" / "pod-a" / "c1", memory_max=str(192 * MIB))
    cgroup = MemoryCgroup.find(root, own)
    assert cgroup is not None and cgroup.directory == container
    assert cgroup.limit() == 160 * MIB
    write(pod, memory_max="max")
    assert cgroup.limit() == 192 * MIB
    write(container, memory_max="max")
    assert cgroup.limit() is None


def test_a_container_sees_its_own_cgroup_at_the_mount(tmp_path: Path) -> None:
    """A path named in /proc/self/cgroup but not below the mount: the mount is the cgroup."""
    root, own = v2(tmp_path, "/kubepods/pod-a/c1")
    write(root, memory_max=str(192 * MIB))
    cgroup = MemoryCgroup.find(root, own)
    assert cgroup is not None and cgroup.directory == root
    assert cgroup.limit() == 192 * MIB


def test_v1_the_memory_hierarchy_and_its_huge_number_for_none(tmp_path: Path) -> None:
    """v1: the memory controller's own hierarchy; its largest page count is no limit."""
    root = tmp_path / "fs"
    (tmp_path / "self").write_text("9:name=systemd:/\n4:memory:/kdraexp-test\n1:cpu,cpuacct:/\n")
    write(root / "memory", memory_limit_in_bytes=V1_UNLIMITED)
    limited = write(root / "memory" / "kdraexp-test", memory_limit_in_bytes=str(192 * MIB))
    cgroup = MemoryCgroup.find(root, tmp_path / "self")
    assert cgroup is not None and cgroup.directory == limited
    assert cgroup.limit() == 192 * MIB
    write(limited, memory_limit_in_bytes=V1_UNLIMITED)
    assert cgroup.limit() is None


def test_no_cgroup_found(tmp_path: Path) -> None:
    """No memory controller mounted, or no /proc/self/cgroup: nothing to read."""
    (tmp_path / "self").write_text("0::/\n")
    assert MemoryCgroup.find(tmp_path / "fs", tmp_path / "self") is None
    assert MemoryCgroup.find(tmp_path / "fs", tmp_path / "missing") is None


def status(peak_kib: int) -> str:
    """A /proc/PID/status with the fields around VmHWM."""
    return f"Name:\tkdraexp\nVmPeak:\t 900000 kB\nVmHWM:\t {peak_kib} kB\nVmRSS:\t 1000 kB\n"


def test_the_peak_is_the_process_and_its_children_summed(tmp_path: Path) -> None:
    """Its own VmHWM and its children's (named by any of its threads); a child gone counts 0."""
    proc = tmp_path / "proc"
    write(proc / "100", status=status(70_000))
    write(proc / "100" / "task" / "100", children="")
    write(proc / "100" / "task" / "101", children="200 300")
    write(proc / "200", status=status(30_000))  # the evaluation process; 300 has ended
    assert peak_rss(proc, "100") == 100_000 * 1024
    assert peak_rss(proc, "999") is None


def test_the_limit_and_peak_published_and_a_peak_near_the_limit_said_once(tmp_path: Path) -> None:
    """Past 80% of the limit, one warning with the figures, not one a look.

    Again only once the limit was raised and the peak passed 80% of the new one.
    """
    root, own = v2(tmp_path, "/")
    write(root, memory_max=str(192 * MIB))
    peaks = [140 * MIB]
    clock = Clock()
    watch = MemoryWatch(clock, MemoryCgroup.find(root, own), lambda: peaks[0])
    metrics = registry(watch)
    with capturedLogs() as events:
        watch.start()
        assert metrics.get_sample_value(LIMIT) == 192 * MIB
        assert metrics.get_sample_value(PEAK) == 140 * MIB
        peaks[0] = 160 * MIB  # 83% of 192 MiB
        clock.advance(LOOK)
        clock.advance(LOOK)
        write(root, memory_max=str(256 * MIB))  # the pod resized: 62%
        clock.advance(LOOK)
        peaks[0] = 210 * MIB  # 82% of 256 MiB
        clock.advance(LOOK)
    assert metrics.get_sample_value(LIMIT) == 256 * MIB
    assert metrics.get_sample_value(PEAK) == 210 * MIB
    said = (
        "Memory: the exporter has held up to {} MiB, {}% of its container's {} MiB limit; past"
        " the limit the kernel kills it, at every collection as large: raise"
        f" resources.limits.memory for this cluster's size ({SIZING}) (logged once while it"
        " lasts)"
    )
    assert [formatEvent(event) for event in events] == [
        said.format(160, 83, 192),
        said.format(210, 82, 256),
    ]
    assert SIZING.endswith("/README.md#sizing")
    watch.stop()
    assert clock.getDelayedCalls() == []


def test_the_most_seen_is_the_peak_when_a_child_ends(tmp_path: Path) -> None:
    """The evaluation process ended takes its peak along: the most seen stays the peak."""
    root, own = v2(tmp_path, "/")
    write(root, memory_max=str(192 * MIB))
    peaks = [170 * MIB]
    clock = Clock()
    watch = MemoryWatch(clock, MemoryCgroup.find(root, own), lambda: peaks[0])
    metrics = registry(watch)
    with capturedLogs() as events:
        watch.start()
        peaks[0] = 90 * MIB
        clock.advance(LOOK)
    assert metrics.get_sample_value(PEAK) == 170 * MIB
    assert len(events) == 1


def test_no_limit_nothing_said_and_no_cgroup_no_limit_published(tmp_path: Path) -> None:
    """Without a limit, or without a cgroup, only the peak is published, and nothing logged."""
    root, own = v2(tmp_path, "/")
    write(root, memory_max="max")
    clock = Clock()
    unlimited = MemoryWatch(clock, MemoryCgroup.find(root, own), lambda: 900 * MIB)
    nowhere = MemoryWatch(clock, None, lambda: 900 * MIB)
    with capturedLogs() as events:
        unlimited.start()
        nowhere.start()
        clock.advance(LOOK)
    for watch in (unlimited, nowhere):
        metrics = registry(watch)
        assert metrics.get_sample_value(LIMIT) is None
        assert metrics.get_sample_value(PEAK) == 900 * MIB
        watch.stop()
    assert events == []
    assert clock.getDelayedCalls() == []
