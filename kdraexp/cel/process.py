"""The exporter's end of the CEL evaluation process: every evaluation bounded in time and memory.

The process (:mod:`kdraexp.cel.worker`) is started with the exporter's first collection and
writes the index of the item it is evaluating into a word of memory both share.  While one item
has had more than :data:`DEADLINE` seconds of the process's CPU (or :data:`WALL` seconds of
waiting), the process is killed and that item is over budget: what Kubernetes' CEL cost limit
does to an evaluation that runs past it.  The process caps its own heap, so an item that needs
more memory is over budget too, and so is one during which the process ended by itself (an
exit, or a signal it raises: an abort, a fault).  A new process takes the rest of the request.

The heap cap makes an allocation fail, never a kill: a SIGKILL (or another signal no evaluation
raises) that the exporter did not send came from outside, the OOM killer or an operator, and
is not the item's doing.  A new process evaluates the item again; ended from outside more than
:data:`OUTSIDE_ENDS` times in one request, the request fails as if no process could be had
(every answer asked again next time), never charging the classes.

The wait blocks the reactor, as evaluating in the exporter's own process would, but never for
longer than one item's budget: callers send a slice's devices at a time and give the reactor
its turns between slices.
"""

from __future__ import annotations

import mmap
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import attrs
import msgspec

from kdraexp.util.serial import serialised

DEADLINE = 0.1
"""CPU seconds one evaluation may take (Kubernetes' cost limit allows tens of milliseconds)."""
WALL = 2.0
"""Seconds one evaluation may wait, on a machine too busy to give the process its CPU."""
STARTUP = 10.0
"""Seconds a new process may take to say it is ready (it imports the runtime)."""
STARTS = 3
"""Processes that may fail to start in a row before evaluation pauses for :data:`RETRY` s."""
RETRY = 60.0
MAX_FRAME = 16 << 20
"""A frame holds answers of 200 characters at most, :data:`BATCH` of them; a longer one means
the process is not ours."""
BATCH = 4096
"""Items, or expressions to compile, sent in one request at most (reading a request is not any
item's budget)."""
POLL = 0.02
"""Seconds between two looks at the process's progress while it evaluates."""
OUTSIDE_ENDS = 2
"""Ends from outside one request is evaluated again after (a third fails it)."""
_OWN_SIGNALS = frozenset(
    getattr(signal, name)
    for name in ("SIGABRT", "SIGBUS", "SIGFPE", "SIGILL", "SIGSEGV", "SIGSYS", "SIGTRAP")
    if hasattr(signal, name)
)
"""Signals a process raises on itself (an abort where an allocation fails, a fault)."""

_HEADER = struct.Struct(">I")
_PROGRESS = struct.Struct("=I")
READING = 0xFFFFFFFF
"""The progress word while the process reads a request (before its first item)."""
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@attrs.frozen
class OverBudget:
    """The answer for an item that had its budget: its expression is over budget."""

    reason: str


TIME = OverBudget(f"over the evaluation budget: more than {DEADLINE:g} s of CPU for one device")
MEMORY = OverBudget("over the evaluation budget: more memory than the evaluation process may hold")

Answer = bool | str | OverBudget


class EvaluationError(Exception):
    """The evaluation process cannot be started or does not speak its protocol."""


class _Stopped(Exception):
    """The process went while evaluating item *index*; *answers* arrived before it went.

    *budget* is the item's, where it had it; None where the process was ended from outside.
    """

    def __init__(self, index: int, budget: OverBudget | None, answers: list[Any], how: str) -> None:
        super().__init__(index, budget, answers, how)
        self.index, self.budget, self.answers, self.how = index, budget, answers, how


class _Ended(Exception):
    """The process ended, or was killed (args[0] is "killed"), before answering everything.

    *outside*: by a signal it did not raise and the exporter did not send.
    """

    def __init__(self, how: str, outside: bool = False) -> None:
        super().__init__(how)
        self.outside = outside


class Evaluator:
    """One evaluation process, started when first needed and again after each kill."""

    def __init__(self, command: Sequence[str] | None = None) -> None:
        self._command = list(command or [sys.executable, "-m", "kdraexp.cel.worker"])
        self._process: subprocess.Popen[bytes] | None = None
        self._progress: mmap.mmap | None = None
        self._ready = False
        self._buffer = bytearray()
        self._retry_at = 0.0
        self._why = ""
        self.kills = 0
        """How many times an item over budget had the process killed."""
        self.ended_outside = 0
        """How many times the process was ended from outside while in use."""
        self.waited = 0.0
        """Seconds spent waiting for processes to start, in all."""
        self._lock = threading.RLock()
        """One request at a time: lists are read in threads (a cancelled one may still run)."""
        self._ending: weakref.finalize[Any, Any] | None = None
        """Kills the process if this object goes without being closed (and at exit)."""
        self._used = _now()
        """When the process last answered or was started: an idle one is ended (:meth:`idle`)."""

    @serialised
    def compile(self, expressions: Sequence[str]) -> list[str | OverBudget | None]:
        """Per expression, None when it compiles, else why it does not.

        :raises EvaluationError: when no process could be started to compile with.
        """
        if len(expressions) > BATCH:  # refusals of BATCH expressions fit a frame
            return [
                found
                for start in range(0, len(expressions), BATCH)
                for found in self.compile(expressions[start : start + BATCH])
            ]
        outside = 0
        while True:
            try:
                (found,) = self._ask(["compile", list(expressions)], 1)
                break
            except _Stopped as stopped:
                if stopped.budget is None:
                    outside = self._ended_from_outside(outside, stopped.how)
                    continue
                if len(expressions) == 1:
                    return [stopped.budget]
                # One of them had the budget: which, each compiled alone says.
                return [self.compile([expression])[0] for expression in expressions]
        if not isinstance(found, list) or len(found) != len(expressions):
            self.close()
            raise EvaluationError("the evaluation process answered a compile with something else")
        return [None if text is None else str(text) for text in found]

    @serialised
    def evaluate(
        self,
        expressions: Sequence[str],
        devices: Sequence[dict[str, Any]],
        items: Sequence[tuple[int, int]],
    ) -> list[Answer]:
        """Each item's answer: (expression index, device index) evaluated.

        :raises EvaluationError: when no process could be started to evaluate with.
        """
        answers: list[Answer | None] = [None] * len(items)
        todo = list(range(len(items)))
        outside = 0
        while todo:
            batch = todo[:BATCH]
            used: dict[int, int] = {}  # the devices this batch reads, numbered again
            sent = [(e, used.setdefault(d, len(used))) for e, d in (items[i] for i in batch)]
            try:
                found = self._ask(
                    ["evaluate", list(expressions), [devices[d] for d in used], sent], len(batch)
                )
            except _Stopped as stopped:
                for position, answer in zip(batch, stopped.answers, strict=False):
                    answers[position] = answer
                if stopped.budget is None:  # not the item's doing: asked again
                    outside = self._ended_from_outside(outside, stopped.how)
                else:
                    culprit = items[batch[stopped.index]][0]
                    for position in todo:  # the expression is over budget for every device
                        if answers[position] is None and items[position][0] == culprit:
                            answers[position] = stopped.budget
                todo = [i for i in todo if answers[i] is None]
                continue
            for position, answer in zip(batch, found, strict=True):
                answers[position] = answer
            todo = todo[BATCH:]
        return [answer for answer in answers if answer is not None]

    def _ended_from_outside(self, before: int, how: str) -> int:
        """Count one more end from outside in this request, *before* it; fail it past a bound.

        :raises EvaluationError: past :data:`OUTSIDE_ENDS`.
        """
        self.ended_outside += 1
        if before >= OUTSIDE_ENDS:
            raise EvaluationError(
                f"the evaluation process was ended from outside {before + 1} times in one "
                f"request ({how})"
            )
        return before + 1

    def idle(self, after: float) -> bool:
        """End the process if it has had nothing to do for *after* seconds; whether it was.

        It takes 23-27 MiB doing nothing: a calm cluster's answers are all kept.  The next
        request starts another, with the same bounds.  Never waits: a process in use (a list
        matching in a thread) is not idle.
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._process is None or _now() - self._used < after:
                return False
            self.close()
            return True
        finally:
            self._lock.release()

    @serialised
    def close(self) -> None:
        """End the process (it ends by itself, too, when the exporter does)."""
        process, self._process = self._process, None
        progress, self._progress = self._progress, None
        if self._ending is not None:
            self._ending.detach()
            self._ending = None
        self._ready = False
        self._buffer.clear()
        if process is not None:
            _end(process)
        if progress is not None:
            progress.close()

    def _spawn(self) -> subprocess.Popen[bytes]:
        descriptor = os.memfd_create("kdraexp-cel-progress") if hasattr(os, "memfd_create") else -1
        try:
            if descriptor >= 0:
                os.ftruncate(descriptor, _PROGRESS.size)
                self._progress = mmap.mmap(descriptor, _PROGRESS.size)
            process = subprocess.Popen(
                [*self._command, str(descriptor)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(descriptor,) if descriptor >= 0 else (),
            )
        except OSError as error:
            if self._progress is not None:
                self._progress.close()
                self._progress = None
            raise EvaluationError(f"cannot start the evaluation process: {error}") from None
        finally:
            if descriptor >= 0:
                os.close(descriptor)
        assert process.stdin is not None
        os.set_blocking(process.stdin.fileno(), False)
        self._process, self._ready = process, False
        self._ending = weakref.finalize(self, _end, process)
        return process

    def _ready_process(self) -> subprocess.Popen[bytes]:
        """A process that said it is ready; at most :data:`STARTS` tries, then a pause."""
        if self._process is not None and self._ready:
            return self._process
        if time.monotonic() < self._retry_at:
            raise EvaluationError(self._why)
        for _ in range(STARTS):
            process = self._process or self._spawn()
            began = time.monotonic()
            try:
                ready = self._receive(process, 1, budget=False)
            except _Ended as ended:
                self.waited += time.monotonic() - began
                self.close()
                self._why = f"the evaluation process ends as it starts ({ended.args[0]})"
                continue
            self.waited += time.monotonic() - began
            if ready != ["ready"]:
                self.close()
                self._why = "the evaluation process is not kdraexp's"
                continue
            self._ready, self._used = True, _now()
            return process
        self._retry_at = time.monotonic() + RETRY
        raise EvaluationError(self._why)

    def _ask(self, request: list[Any], expected: int) -> list[Any]:
        """Send *request*; its *expected* answers.

        :raises _Stopped: for the item being evaluated when its budget ran out or the process
            ended (the process is gone then; the next request starts another).
        """
        process = self._ready_process()
        self._mark(READING)
        self._used = _now()
        answers: list[Any] = []
        try:
            self._send(process, _ENCODER.encode(request))
            framed = request[0] == "evaluate"
            return self._receive(process, expected, answers=answers, framed=framed)
        except _Ended as ended:
            current = self._current()
            culprit = min(max(0 if current == READING else current, len(answers)), expected - 1)
            self.close()
            how = str(ended.args[0])
            budget = None if ended.outside else TIME if how == "killed" else MEMORY
            raise _Stopped(culprit, budget, answers[:culprit], how) from None

    def _send(self, process: subprocess.Popen[bytes], body: bytes) -> None:
        assert process.stdin is not None
        data = memoryview(_HEADER.pack(len(body)) + body)
        descriptor = process.stdin.fileno()
        limit = time.monotonic() + WALL
        while data:
            if not select.select([], [descriptor], [], max(0.0, limit - time.monotonic()))[1]:
                self._kill(process)
                raise _Ended("killed")
            try:
                data = data[os.write(descriptor, data) :]
            except BrokenPipeError:
                raise _ended(process) from None

    def _receive(
        self,
        process: subprocess.Popen[bytes],
        expected: int,
        budget: bool = True,
        answers: list[Any] | None = None,
        framed: bool = False,
    ) -> list[Any]:
        """Read *expected* answers, each item within its budget (see :meth:`_frames`).

        Without *budget* (the process starting), only :data:`STARTUP` seconds bound the wait.
        """
        assert process.stdout is not None
        answers = [] if answers is None else answers
        descriptor = process.stdout.fileno()
        current, since, cpu = self._current(), time.monotonic(), _cpu(process.pid)
        while not self._frames(answers, expected, framed):
            if select.select([descriptor], [], [], POLL)[0]:
                chunk = os.read(descriptor, 1 << 16)
                if not chunk:
                    raise _ended(process)
                self._buffer += chunk
                continue
            now = self._current()
            if now != current:  # the next item: its own budget
                current, since, cpu = now, time.monotonic(), _cpu(process.pid)
                continue
            waited = time.monotonic() - since
            if not budget:
                over = waited > STARTUP
            elif current == READING:
                over = waited > WALL
            else:
                used = _cpu(process.pid)
                spent = used - cpu if used is not None and cpu is not None else 0.0
                over = waited > WALL or spent > DEADLINE
            if over:
                self._kill(process)
                raise _Ended("killed")
        return answers

    def _frames(self, answers: list[Any], expected: int, framed: bool) -> bool:
        """Move the complete frames of the buffer to *answers*; whether all *expected* are in.

        *framed*: each frame is a list of answers (an evaluation's), else one answer.
        """
        buffer = self._buffer
        while len(answers) < expected and len(buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer)
            if size > MAX_FRAME:
                self.close()
                raise EvaluationError("the evaluation process sent a frame too large")
            if len(buffer) < _HEADER.size + size:
                break
            try:
                value = _DECODER.decode(bytes(buffer[_HEADER.size : _HEADER.size + size]))
            except msgspec.DecodeError:
                self.close()
                raise EvaluationError("the evaluation process sent what is not msgpack") from None
            del buffer[: _HEADER.size + size]
            if framed:
                if not isinstance(value, list):
                    self.close()
                    raise EvaluationError("the evaluation process sent what is not answers")
                answers.extend([MEMORY if one == ["memory"] else one for one in value])
            else:
                answers.append(value)
        return len(answers) >= expected

    def _mark(self, index: int) -> None:
        if self._progress is not None:
            _PROGRESS.pack_into(self._progress, 0, index)

    def _current(self) -> int:
        """The item the process is evaluating, or READING (0 where no memory is shared)."""
        if self._progress is None:
            return 0
        return int(_PROGRESS.unpack_from(self._progress)[0])

    def _kill(self, process: subprocess.Popen[bytes]) -> None:
        self.kills += 1
        process.kill()


def _ended(process: subprocess.Popen[bytes]) -> _Ended:
    """How the process ended (its pipe closed): by itself, or from outside."""
    try:
        code = process.wait(timeout=WALL)
    except subprocess.TimeoutExpired:
        process.kill()
        return _Ended("not answering")
    if code < 0:
        return _Ended(f"signal {-code}", outside=-code not in _OWN_SIGNALS)
    return _Ended(f"exit code {code}")


def _now() -> float:
    return time.monotonic()


def _end(process: subprocess.Popen[bytes]) -> None:
    """Kill the process, wait for it and close its pipes (also for an Evaluator never closed)."""
    process.kill()
    process.wait()
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()


def _cpu(pid: int) -> float | None:
    """The CPU seconds process *pid* has used (None where /proc cannot say)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, IndexError, ValueError):
        return None
