"""Reading the files an operator points at: regular files only, never more than a limit.

A FIFO named as a token file would block the whole process on open; ``/dev/zero`` or a huge
file would grow memory without bound.  Files are opened without blocking, must be regular, and
are read up to their limit only.
"""

from __future__ import annotations

import os
import stat

SMALL = 2**20
"""For tokens, certificates and kubeconfigs: far more than any real one."""


class FileProblem(OSError):
    """A file that is not a regular file, or is larger than its limit; says which."""


def read_regular(path: str | os.PathLike[str], limit: int = SMALL) -> bytes:
    """The content of the regular file at *path*, at most *limit* bytes.

    :raises FileProblem: for anything but a regular file, or a file larger than *limit*.
    :raises OSError: when it cannot be opened or read.
    """
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise FileProblem(f"{os.fspath(path)} is not a regular file")
        if status.st_size > limit:
            raise FileProblem(f"{os.fspath(path)} is larger than {limit} bytes")
        parts: list[bytes] = []
        size = 0
        while size <= limit:
            # The whole file at once: one part is returned as it is, not copied by the join
            # (a 50 MB file was held twice); more comes only if the file grew meanwhile.
            wanted = status.st_size + 1 if not parts else 1 << 20
            part = os.read(descriptor, min(wanted, limit + 1 - size))
            if not part:
                break
            parts.append(part)
            size += len(part)
        if size > limit:
            raise FileProblem(f"{os.fspath(path)} is larger than {limit} bytes")
        return b"".join(parts)
    finally:
        os.close(descriptor)


def kernel_text(path: str | os.PathLike[str]) -> str:
    """The text of a small file the kernel writes (``/proc``, ``/sys/fs/cgroup``).

    Empty when it cannot be read: a process that ended, a controller not mounted.
    """
    try:
        return read_regular(path, 65536).decode()
    except (OSError, UnicodeDecodeError):
        return ""
