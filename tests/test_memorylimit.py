"""The memory limit read from a cgroup (v2, v1, a container's own), published, and warned of."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.task import Clock
from twisted.logger import capturedLogs, formatEvent

from kdraexp.telemetry.memorylimit import LOOK, SIZING, MemoryWatch
from kdraexp.telemetry.selfmetrics import registry
from kdraexp.util.cgroup import MemoryCgroup, MemoryUse

MIB = 2**20
LIMIT = "kube_dra_exporter_memory_limit_bytes"
PEAK = "kube_dra_exporter_memory_peak_bytes"
V1_UNLIMITED = "9223372036854771712"
"""What cgroup v1 writes in memory.limit_in_bytes when nothing limits it (on 4 KiB pages)."""


def write(directory: Path, **files: str) -> Path:
    """*files* (dots written as underscores in their names) in *directory*, made if need be."""
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
    """The container's limit, its use and its peak; a pod's smaller limit above it wins."""
    root, own = v2(tmp_path)
    write(root / "kubepods", memory_max="max")
    write(root / "kubepods" / "pod-a", memory_max=str(160 * MIB))
    container = write(
        root / "kubepods" / "pod-a" / "c1",
        memory_max=str(192 * MIB),
        memory_current=str(90 * MIB),
        memory_peak=str(150 * MIB),
    )
    cgroup = MemoryCgroup.find(root, own)
    assert cgroup is not None and cgroup.directory == container
    assert cgroup.read() == MemoryUse(160 * MIB, 90 * MIB, 150 * MIB)


def test_v2_no_limit_and_no_peak_on_an_older_kernel(tmp_path: Path) -> None:
    """``max`` is no limit; a kernel before 5.19 keeps no peak."""
    root, own = v2(tmp_path, "/")
    write(root, memory_max="max", memory_current=str(70 * MIB))
    cgroup = MemoryCgroup.find(root, own)
    assert cgroup is not None and cgroup.read() == MemoryUse(None, 70 * MIB, None)


def test_a_container_sees_its_own_cgroup_at_the_mount(tmp_path: Path) -> None:
    """A path named in /proc/self/cgroup but not below the mount: the mount is the cgroup."""
    root, own = v2(tmp_path, "/kubepods/pod-a/c1")
    write(root, memory_max=str(192 * MIB), memory_current=str(80 * MIB))
    cgroup = MemoryCgroup.find(root, own)
    assert cgroup is not None and cgroup.directory == root
    assert cgroup.read() == MemoryUse(192 * MIB, 80 * MIB, None)


def test_v1_the_memory_hierarchy_and_its_huge_number_for_none(tmp_path: Path) -> None:
    """v1: the memory controller's own hierarchy; its largest page count is no limit."""
    root = tmp_path / "fs"
    (tmp_path / "self").write_text("9:name=systemd:/\n4:memory:/kdraexp-test\n1:cpu,cpuacct:/\n")
    write(root / "memory", memory_limit_in_bytes=V1_UNLIMITED)
    limited = write(
        root / "memory" / "kdraexp-test",
        memory_limit_in_bytes=str(192 * MIB),
        memory_usage_in_bytes=str(100 * MIB),
        memory_max_usage_in_bytes=str(180 * MIB),
    )
    cgroup = MemoryCgroup.find(root, tmp_path / "self")
    assert cgroup is not None and cgroup.directory == limited
    assert cgroup.read() == MemoryUse(192 * MIB, 100 * MIB, 180 * MIB)
    (limited / "memory.limit_in_bytes").write_text(V1_UNLIMITED)
    assert cgroup.read() == MemoryUse(None, 100 * MIB, 180 * MIB)


def test_no_cgroup_found(tmp_path: Path) -> None:
    """No memory controller mounted, or no /proc/self/cgroup: nothing to read."""
    (tmp_path / "self").write_text("0::/\n")
    assert MemoryCgroup.find(tmp_path / "fs", tmp_path / "self") is None
    assert MemoryCgroup.find(tmp_path / "fs", tmp_path / "missing") is None


def test_the_limit_and_peak_published_and_a_peak_near_the_limit_said_once(tmp_path: Path) -> None:
    """Past 80% of the limit, one warning with the figures, not one a look.

    Again only once the limit was raised and the peak passed 80% of the new one.
    """
    root, own = v2(tmp_path, "/")
    write(
        root, memory_max=str(192 * MIB), memory_current=str(100 * MIB), memory_peak=str(140 * MIB)
    )
    clock = Clock()
    watch = MemoryWatch(clock, MemoryCgroup.find(root, own))
    metrics = registry(watch)
    with capturedLogs() as events:
        watch.start()
        assert metrics.get_sample_value(LIMIT) == 192 * MIB
        assert metrics.get_sample_value(PEAK) == 140 * MIB
        write(root, memory_peak=str(160 * MIB))  # 83% of 192 MiB
        clock.advance(LOOK)
        clock.advance(LOOK)
        write(root, memory_max=str(256 * MIB))  # the pod resized: 62%
        clock.advance(LOOK)
        write(root, memory_peak=str(210 * MIB))  # 82% of 256 MiB
        clock.advance(LOOK)
    assert metrics.get_sample_value(LIMIT) == 256 * MIB
    assert metrics.get_sample_value(PEAK) == 210 * MIB
    assert [formatEvent(event) for event in events] == [
        "Memory: the exporter's container has held up to 160 MiB, 83% of its 192 MiB limit;"
        " past the limit the kernel kills it, at every collection as large: raise"
        f" resources.limits.memory for this cluster's size ({SIZING}) (logged once while it"
        " lasts)",
        "Memory: the exporter's container has held up to 210 MiB, 82% of its 256 MiB limit;"
        " past the limit the kernel kills it, at every collection as large: raise"
        f" resources.limits.memory for this cluster's size ({SIZING}) (logged once while it"
        " lasts)",
    ]
    assert SIZING.endswith("/README.md#sizing")
    watch.stop()
    assert clock.getDelayedCalls() == []


def test_the_highest_use_seen_is_the_peak_where_the_kernel_keeps_none(tmp_path: Path) -> None:
    """Without memory.peak the most seen at a look is the peak: it does not fall with the use."""
    root, own = v2(tmp_path, "/")
    write(root, memory_max=str(192 * MIB), memory_current=str(170 * MIB))
    clock = Clock()
    watch = MemoryWatch(clock, MemoryCgroup.find(root, own))
    metrics = registry(watch)
    with capturedLogs() as events:
        watch.start()
        write(root, memory_current=str(90 * MIB))
        clock.advance(LOOK)
    assert metrics.get_sample_value(PEAK) == 170 * MIB
    assert len(events) == 1


def test_no_limit_nothing_said_and_no_cgroup_nothing_published(tmp_path: Path) -> None:
    """Without a limit only the peak is published, and nothing logged.

    Without a cgroup, neither family, and no timer.
    """
    root, own = v2(tmp_path, "/")
    write(root, memory_max="max", memory_current=str(900 * MIB))
    clock = Clock()
    unlimited = MemoryWatch(clock, MemoryCgroup.find(root, own))
    nowhere = MemoryWatch(clock, None)
    metrics = registry(unlimited)
    with capturedLogs() as events:
        unlimited.start()
        nowhere.start()
        clock.advance(LOOK)
    assert metrics.get_sample_value(LIMIT) is None
    assert metrics.get_sample_value(PEAK) == 900 * MIB
    assert list(nowhere.collect()) == []
    assert events == []
    unlimited.stop()
    nowhere.stop()
    assert clock.getDelayedCalls() == []
