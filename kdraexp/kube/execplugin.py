"""Running an exec credential plugin as a child process, within bounds.

The plugin starts in a session of its own, so that at the deadline (or when the collection that
wanted it is abandoned) the whole process group is killed, helpers it started included, and its
pipes closed.  Its standard output is read up to :data:`STDOUT_LIMIT` (an ExecCredential is a few
KiB; past the limit the plugin is killed) and its standard error up to :data:`STDERR_LIMIT`, of
which a failure message quotes the whole, clipped.  Processes of the group that outlive the
plugin become children of PID 1, which the exporter is in its container: :mod:`kdraexp.app.reaper`
reaps them.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from contextlib import suppress

from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessExitedAlready, ProcessTerminated
from twisted.internet.interfaces import IReactorProcess
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

STDOUT_LIMIT = 1024 * 1024
"""Bytes of standard output read from a plugin."""
STDERR_LIMIT = 64 * 1024
"""Bytes of standard error kept from a plugin."""
MESSAGE_LIMIT = 1000
"""Characters of standard error quoted in a failure message."""

_SESSION = "import os, sys; os.setsid(); os.execv(sys.argv[1], sys.argv[2:])"
"""Run by the interpreter between fork and the plugin: a new session (and process group) whose
leader is the plugin itself, so the group id is the plugin's pid.  Twisted's spawnProcess has no
hook between fork and exec."""


class PluginError(Exception):
    """The plugin could not give its output; the message says why, in words."""


class _Collect(ProcessProtocol):
    """Collects the plugin's output within limits; ``done`` fires with its exit status."""

    def __init__(self) -> None:
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.too_much = False
        self.done: Deferred[int] = Deferred(canceller=lambda _: self.kill())

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        if len(self.stdout) + len(data) > STDOUT_LIMIT:
            self.too_much = True
            self.kill()
            return
        self.stdout += data

    def errReceived(self, data: bytes) -> None:
        room = STDERR_LIMIT - len(self.stderr)
        if room > 0:
            self.stderr += data[:room]

    def processEnded(self, reason: Failure) -> None:
        if self.done.called:
            return
        if reason.check(ProcessDone):
            self.done.callback(0)
        elif isinstance(reason.value, ProcessTerminated):
            code = reason.value.exitCode
            self.done.callback(code if code is not None else -(reason.value.signal or 0))
        else:
            self.done.errback(reason)

    def kill(self) -> None:
        """Kill the plugin's whole process group and close its pipes."""
        transport = self.transport
        if transport is None:
            return
        pid = getattr(transport, "pid", None)
        if pid:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        with suppress(ProcessExitedAlready):
            transport.signalProcess("KILL")
        transport.loseConnection()


async def run_plugin(
    executable: str,
    argv: list[str],
    env: Mapping[str, str],
    reactor: IReactorProcess,
    timeout: float,
) -> bytes:
    """Run the plugin *executable* (``argv[0]`` is its name) and return its standard output.

    Cancelling the returned coroutine's Deferred kills the plugin's process group.

    :raises PluginError: when it fails, writes too much, or outlasts *timeout* seconds.
    """
    name = argv[0]
    protocol = _Collect()
    reactor.spawnProcess(
        protocol,
        sys.executable,
        [sys.executable, "-c", _SESSION, executable, *argv],
        env=dict(env),
    )
    done = protocol.done

    def timed_out(_: object, seconds: float) -> Failure:
        return Failure(PluginError(f"exec plugin {name} ran longer than {seconds:g}s"))

    done.addTimeout(timeout, reactor, onTimeoutCancel=timed_out)  # type: ignore[arg-type]
    code = await done
    if protocol.too_much:
        raise PluginError(
            f"exec plugin {name} wrote more than {STDOUT_LIMIT // 1024} KiB to standard output"
        )
    if code != 0:
        raise PluginError(f"exec plugin {name} {_ended(code)}{_stderr(bytes(protocol.stderr))}")
    return bytes(protocol.stdout)


def _ended(code: int) -> str:
    if code < 0:
        return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _stderr(stderr: bytes) -> str:
    """The whole of standard error, its lines joined, clipped: what the plugin said."""
    text = " | ".join(
        line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()
    )
    if not text:
        return " (nothing on standard error)"
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 3] + "..."
    return f": {text}"
