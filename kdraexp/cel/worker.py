"""The process that evaluates CEL selectors: a hostile one cannot stall or exhaust the exporter.

A selector of a DeviceClass or a claim is anyone's text, and one evaluation may run for minutes or
allocate gigabytes (a few chained ``replace()`` calls do both).  The runtime has no cost limit, so
the exporter evaluates in this process: it caps its own memory here, and the exporter's side
(:mod:`kdraexp.cel.process`) kills it when one evaluation has had its CPU budget.

Run as ``python -m kdraexp.cel.worker <memfd>``, the memfd holding the index of the item
being evaluated (see :class:`Progress`).  Frames on stdin and stdout are a 4-byte big-endian
length and a msgpack body.  Once started, it says ``"ready"``; then it answers


- ``["compile", [expression, ...]]`` -> one frame: per expression, None or why it is refused;
- ``["evaluate", [expression, ...], [device, ...], [[expression index, device index], ...]]`` ->
  frames of answers in the items' order, each a list: True, False, why it cannot be said (a
  string), or ``["memory"]`` when it needed more than the process may hold.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import resource
import signal
import struct
import sys
from typing import Any

import msgspec

from kdraexp.cel.library import one_line

ENGINE = "KDRAEXP_CEL_ENGINE"
"""Set to ``common-expression-language`` to use that engine where Google's is installed too."""
MEMORY = 64 * 2**20
"""Bytes of heap the process may take beyond what it holds once started."""
PROGRAMS = 1024
"""Compiled expressions kept; when full, they are compiled again as needed."""
MAX_FRAME = 64 * 2**20
"""A request larger than this is refused (the exporter sends a slice's devices at most)."""

FLUSH = 4096
"""Answers written in one frame at most (all of them at the end of a request)."""
ITERATIONS = "Iteration budget exceeded"
"""What Google's runtime answers past 10,000 iterations of comprehensions, a limit of its own.

Kubernetes bounds a selector by its cost instead (checked when the object is written), which
allows hundreds of thousands: such an evaluation is made again by the Rust engine, which has no
such limit; the evaluation's CPU budget (:data:`kdraexp.cel.process.DEADLINE`) still bounds it.
"""

_HEADER = struct.Struct(">I")
_PROGRESS = struct.Struct("=I")
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()


def engine() -> Any:
    """Google's runtime where it has a wheel, else the Rust one (selected at import)."""
    if os.environ.get(ENGINE) != "common-expression-language":
        try:
            from kdraexp.cel import runtime
        except ImportError:
            pass
        else:
            return runtime
    from kdraexp.cel import rust

    return rust


def _die_with_parent() -> None:
    """Ask the kernel to end this process when the exporter ends (Linux's PR_SET_PDEATHSIG)."""
    # Elsewhere, the end of stdin ends it once the current evaluation is done.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _cap_memory() -> None:
    """Let the heap grow by :data:`MEMORY` at most: past it, allocations fail (MemoryError)."""
    used = 0
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmData:"):
                    used = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return
    if used:
        limit = used + MEMORY
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _read_exactly(size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(0, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _frame(value: Any) -> bytes:
    body = _ENCODER.encode(value)
    return _HEADER.pack(len(body)) + body


def _write(data: bytes) -> None:
    while data:
        data = data[os.write(1, data) :]


class Progress:
    """The word of memory shared with the exporter: the index of the item being evaluated.

    Without it (no memfd here), every answer is written as soon as it is known instead, so
    that the exporter can tell the item being evaluated from the answers it has.
    """

    def __init__(self, argv: list[str]) -> None:
        self._memory: mmap.mmap | None = None
        descriptor = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else -1
        if descriptor >= 0:
            self._memory = mmap.mmap(descriptor, _PROGRESS.size)
            os.close(descriptor)

    @property
    def shared(self) -> bool:
        """Whether the exporter can see the index."""
        return self._memory is not None

    def mark(self, index: int) -> None:
        """Item *index* is being evaluated."""
        if self._memory is not None:
            _PROGRESS.pack_into(self._memory, 0, index)


class Programs:
    """Compiled expressions by their text, or why each was refused."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        """The engine's module (see :func:`engine`)."""
        self._known: dict[str, Any] = {}
        self._longer: Programs | None = None
        """The Rust engine's, for what Google's stops at :data:`ITERATIONS` (loaded when needed)."""

    def get(self, expression: str) -> Any:
        """The program, or a string saying why there is none."""
        found = self._known.get(expression)
        if found is None:
            if len(self._known) >= PROGRAMS:
                self._known.clear()
            try:
                found = self.runtime.compile_selector(expression)
            except MemoryError:
                raise
            except Exception as error:  # the runtime raises RuntimeError subclasses and others
                found = one_line(error)
            self._known[expression] = found
        return found

    def evaluate(self, expression: str, device: dict[str, Any]) -> Any:
        """Whether *device* satisfies *expression*, or why that cannot be said."""
        program = self.get(expression)
        if isinstance(program, str):
            return program
        answer = self.runtime.evaluate(program, device)
        if (
            isinstance(answer, str)
            and ITERATIONS in answer
            and self.runtime.NAME != "common-expression-language"
        ):
            longer = self._longer_engine()
            if longer is not None:
                return longer.evaluate(expression, device)
        return answer

    def _longer_engine(self) -> Programs | None:
        if self._longer is None:
            try:
                from kdraexp.cel import rust
            except ImportError:  # not installed: Google's answer stands
                return None
            self._longer = Programs(rust)
        return self._longer


def serve(progress: Progress, runtime: Any) -> None:
    """Answer requests until stdin ends."""
    programs = Programs(runtime)
    _write(_frame("ready"))
    while True:
        header = _read_exactly(_HEADER.size)
        if header is None:
            return
        (size,) = _HEADER.unpack(header)
        if size > MAX_FRAME:
            return
        body = _read_exactly(size)
        if body is None:
            return
        request = _DECODER.decode(body)
        if request[0] == "compile":
            compiled = []
            for index, expression in enumerate(request[1]):
                progress.mark(index)  # each expression's compile has its own budget
                compiled.append(programs.get(expression))
            _write(_frame([found if isinstance(found, str) else None for found in compiled]))
            continue
        _, expressions, devices, items = request
        pending: list[Any] = []
        for index, (expression, device) in enumerate(items):
            progress.mark(index)
            try:
                answer: Any = programs.evaluate(expressions[expression], devices[device])
            except MemoryError:
                answer = ["memory"]
            pending.append(answer)
            if len(pending) >= FLUSH or not progress.shared:
                _write(_frame(pending))
                pending.clear()
        if pending:
            _write(_frame(pending))


def main() -> None:
    """The process's entry point."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C reaches the exporter, which ends this
    progress = Progress(sys.argv)
    runtime = engine()
    _cap_memory()
    with contextlib.suppress(BrokenPipeError):
        serve(progress, runtime)
    sys.exit(0)


if __name__ == "__main__":
    main()
