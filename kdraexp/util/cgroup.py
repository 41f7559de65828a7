"""The memory cgroup this process runs in: its limit, what it holds, and the most it has held.

The kernel kills a process of the cgroup once the cgroup's memory passes its limit (a
container's ``resources.limits.memory``), whatever each process holds alone. Read from cgroup v2
(``memory.max``, ``memory.current``, ``memory.peak``) or v1 (``memory.limit_in_bytes``,
``memory.usage_in_bytes``, ``memory.max_usage_in_bytes``), at the path ``/proc/self/cgroup``
names below the mount, else at the mount itself (a container's own cgroup, mounted as the root
of its namespace). The limit is the smallest of the cgroup's and its ancestors'.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from kdraexp.util.files import read_regular

UNLIMITED = 2**62
"""At or above this, a v1 limit means none (the kernel writes its largest page count there)."""


@attrs.frozen
class MemoryUse:
    """What the cgroup says now, in bytes; None where it does not say."""

    limit: int | None
    """None: no limit, in the cgroup or above it."""
    current: int
    """What it holds now, page cache included (the kernel reclaims that before it kills)."""
    peak: int | None
    """The most it has held since it was made, where the kernel keeps that (v1; v2 from 5.19)."""


@attrs.frozen
class Files:
    """The names one version of cgroups gives the limit, the use now and the most used."""

    limit: str
    current: str
    peak: str


V2 = Files("memory.max", "memory.current", "memory.peak")
V1 = Files("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.max_usage_in_bytes")


@attrs.frozen
class MemoryCgroup:
    """Where the memory cgroup's files are, and which version's they are."""

    directory: Path
    """The process's own cgroup."""
    top: Path
    """The mount: the limit is looked for from :attr:`directory` up to here."""
    files: Files

    @classmethod
    def find(
        cls, root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")
    ) -> MemoryCgroup | None:
        """The memory cgroup of this process below *root*, as *own* names it; None if none."""
        paths: dict[str, str] = {}  # by controllers: "" for v2's one hierarchy
        for line in _text(own).splitlines():
            _, controllers, path = [*line.split(":", 2), "", ""][:3]
            paths[controllers] = path
        if "memory" in _text(root / "cgroup.controllers").split():
            top, files, path = root, V2, paths.get("", "/")
        else:
            top, files = root / "memory", V1
            path = next((p for c, p in paths.items() if "memory" in c.split(",")), "/")
        for directory in (top / path.lstrip("/"), top):
            if (directory / files.limit).is_file():
                return cls(directory, top, files)
        return None

    def read(self) -> MemoryUse | None:
        """What the cgroup says now; None once its files cannot be read."""
        current = _number(self.directory / self.files.current)
        if current is None:
            return None
        return MemoryUse(self._limit(), current, _number(self.directory / self.files.peak))

    def _limit(self) -> int | None:
        """The smallest limit of the cgroup and its ancestors up to the mount."""
        limits, directory = [], self.directory
        while True:
            found = _number(directory / self.files.limit)
            if found is not None and found < UNLIMITED:
                limits.append(found)
            if directory == self.top or self.top not in directory.parents:
                return min(limits, default=None)
            directory = directory.parent


def _text(path: Path) -> str:
    """The file at *path* (a few kilobytes at most); empty when it cannot be read."""
    try:
        return read_regular(path, 65536).decode()
    except (OSError, UnicodeDecodeError):
        return ""


def _number(path: Path) -> int | None:
    """The number in the file at *path*; None for ``max``, nothing, or no file."""
    text = _text(path).strip()
    return int(text) if text.isdigit() else None
