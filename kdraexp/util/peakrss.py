"""The most resident memory this process and the processes it started have held.

What a memory limit must hold, as the README's sizing measures it: the kernel's high-water mark
of each process's resident memory (``VmHWM``), this one's and its children's (the CEL
evaluation process) summed. Page cache is not counted: the kernel reclaims it before it kills.
"""

from __future__ import annotations

from pathlib import Path

from kdraexp.util.files import kernel_text


def peak_rss(proc: Path = Path("/proc"), pid: str = "self") -> int | None:
    """Bytes: the peak resident memory of process *pid* and its children; None if unknown."""
    own = _high_water(proc / pid)
    if own is None:
        return None
    children: set[str] = set()
    try:
        for task in (proc / pid / "task").iterdir():
            children.update(kernel_text(task / "children").split())
    except OSError:
        pass  # no threads to read: this process's alone
    return own + sum(_high_water(proc / child) or 0 for child in children)


def _high_water(process: Path) -> int | None:
    for line in kernel_text(process / "status").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None
