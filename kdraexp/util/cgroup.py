"""The memory limit of the cgroup this process runs in: past it, the kernel kills.

The kernel kills a process of the cgroup once the cgroup's memory passes its limit (a
container's ``resources.limits.memory``), whatever each process holds alone. Read from cgroup v2
(``memory.max``) or v1 (``memory.limit_in_bytes``), at the path ``/proc/self/cgroup`` names below
the mount, else at the mount itself (a container's own cgroup, mounted as the root of its
namespace). The limit is the smallest of the cgroup's and its ancestors'.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from kdraexp.util.files import kernel_text

UNLIMITED = 2**62
"""At or above this, a v1 limit means none (the kernel writes its largest page count there)."""
V2 = "memory.max"
V1 = "memory.limit_in_bytes"


@attrs.frozen
class MemoryCgroup:
    """Where the memory cgroup's limit is, and the file (v2's or v1's) that holds it."""

    directory: Path
    """The process's own cgroup."""
    top: Path
    """The mount: the limit is looked for from :attr:`directory` up to here."""
    file: str

    @classmethod
    def find(
        cls, root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")
    ) -> MemoryCgroup | None:
        """The memory cgroup of this process below *root*, as *own* names it; None if none."""
        paths: dict[str, str] = {}  # by controllers: "" for v2's one hierarchy
        for line in kernel_text(own).splitlines():
            _, controllers, path = [*line.split(":", 2), "", ""][:3]
            paths[controllers] = path
        if "memory" in kernel_text(root / "cgroup.controllers").split():
            top, file, path = root, V2, paths.get("", "/")
        else:
            top, file = root / "memory", V1
            path = next((p for c, p in paths.items() if "memory" in c.split(",")), "/")
        for directory in (top / path.lstrip("/"), top):
            if (directory / file).is_file():
                return cls(directory, top, file)
        return None

    def limit(self) -> int | None:
        """The smallest limit of the cgroup and its ancestors up to the mount; None if none."""
        limits, directory = [], self.directory
        while True:
            text = kernel_text(directory / self.file).strip()
            if text.isdigit() and int(text) < UNLIMITED:  # v2 writes "max" for none
                limits.append(int(text))
            if directory == self.top or self.top not in directory.parents:
                return min(limits, default=None)
            directory = directory.parent
