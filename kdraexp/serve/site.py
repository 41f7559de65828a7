"""HTTP connections within bounds, whatever the clients do, and counted.

A client that sends its request headers a byte at a time is dropped once :data:`HEADER_DEADLINE`
has passed since the request's first byte, and one that does not read its answer once the send
buffers have stayed full for :data:`WRITE_DEADLINE`.  A listener holds at most
:data:`MAX_CONNECTIONS`; past that, a new connection takes the place of one that can be shed:
first one whose answer waits for a client not reading, then the longest idle, then the slowest
still sending its headers; never one in its first :data:`GRACE` (a burst of clients each send
their request at once), nor one whose request waits unread in its socket, nor one being
answered.  When none can be shed the listener stops accepting until one can or one ends: new
clients wait in the kernel's queue instead of being turned away, so a flood of slow clients
cannot keep a probe of ``/healthz`` out and a burst of quick ones is answered in full.
A request with a body is answered 413 as soon as its headers are read: no route takes a body,
and Twisted would otherwise spool it to a temporary file.  A header line longer than Twisted's
16 KiB is answered 431 and the connection closed at once, over TLS too.  Each finished request
is counted by handler and code (:mod:`kdraexp.telemetry.http`) and logged at debug level, not
info: a scrape every fifteen seconds is not news.
"""

from __future__ import annotations

import fcntl
import sys
import termios
from collections.abc import Callable, Iterable
from typing import Any, cast

from twisted.internet.interfaces import IAddress, IDelayedCall, IListeningPort
from twisted.internet.main import CONNECTION_DONE
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.http import HTTPChannel
from twisted.web.resource import IResource
from twisted.web.server import Request, Site

from kdraexp.telemetry.http import HTTPStats

log = Logger()

HEADER_DEADLINE = 10.0
"""Seconds from a request's first byte to the end of its headers."""
IDLE_TIMEOUT = 120.0
"""Seconds a kept-alive connection may stay silent (Prometheus scrapes at most every minute or
two on one connection)."""
WRITE_DEADLINE = 30.0
"""Seconds an answer may wait, the send buffers full, for a client that does not read it."""
GRACE = 1.0
"""Seconds a new connection, or a request just begun, is not shed to make room for another."""
MAX_CONNECTIONS = 256
"""Open connections per listener: well under the usual limit of 1,024 open files, with room for
forty Prometheus replicas and their retries."""


def _refusal(status: bytes, body: bytes) -> bytes:
    """A whole answer that closes the connection."""
    return (
        b"HTTP/1.1 " + status + b"\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n"
        b"Content-Length: %d\r\n"
        b"Connection: close\r\n\r\n" % len(body)
    ) + body


_TOO_LARGE = _refusal(b"413 Content Too Large", b"request bodies are not accepted\n")
_LINE_TOO_LONG = _refusal(
    b"431 Request Header Fields Too Large", b"a header line is longer than 16 KiB\n"
)


class BoundedChannel(HTTPChannel):
    """One connection: a deadline for each request's headers, no request bodies."""

    site: BoundedSite
    transport: Any

    def connectionMade(self) -> None:
        """Count the connection (and make room for it)."""
        super().connectionMade()
        self.opened = self.site.reactor.seconds()
        self._deadline: IDelayedCall | None = None
        self._requested = 0.0
        """When the request under way began (its first byte)."""
        self._in_request = False
        self._refused = False
        self._stall: IDelayedCall | None = None
        self.stalled_since: float | None = None
        """Since when the answer has waited for the client to read (None: it has not)."""

    def dataReceived(self, data: bytes) -> None:
        """Start the header deadline at a request's first byte."""
        if self._refused:
            return
        if self._deadline is None and not self._in_request:
            self._requested = self.site.reactor.seconds()
            self._deadline = self.callLater(HEADER_DEADLINE, self._too_slow)
        super().dataReceived(data)

    def pauseProducing(self) -> None:
        """The send buffers are full: the client has until :data:`WRITE_DEADLINE` to read."""
        super().pauseProducing()
        if self._stall is None:
            self.stalled_since = self.site.reactor.seconds()
            self._stall = self.callLater(WRITE_DEADLINE, self._not_reading)

    def resumeProducing(self) -> None:
        """The client read: the answer flows again, and the deadline starts over.

        The stall is forgotten first: resuming writes until the buffers fill, which pauses again
        (often within this call) and must arm a fresh deadline, not find the old one and have it
        cancelled after.
        """
        self._cancel_stall()
        super().resumeProducing()

    def allHeadersReceived(self) -> None:
        """Headers complete: stop the deadline; refuse a body before reading any of it."""
        self._cancel_deadline()
        self._in_request = True
        if self.length != 0:  # a Content-Length, or None for chunked
            self._refuse(413, _TOO_LARGE)
            return
        super().allHeadersReceived()

    def lineLengthExceeded(self, line: bytes) -> None:  # noqa: N802 - LineReceiver
        """A line past ``MAX_LENGTH``: answered 431 and closed.

        LineReceiver's own closes the transport with the channel still registered as its
        producer, which TLS waits for: the connection stayed open, silent, until the deadline.
        """
        self._refuse(431, _LINE_TOO_LONG)

    def _refuse(self, code: int, answer: bytes) -> None:
        """Answer *answer*, counted as *code*, read nothing more and close."""
        self._refused = True
        self._cancel_deadline()
        self.site.refused(code)
        self.transport.write(answer)
        self.loseConnection()  # HTTPChannel's: unregisters itself as the producer first

    def requestDone(self, request: Request) -> None:
        """The answer is written: the connection may read its next request."""
        self._in_request = False
        super().requestDone(request)

    def shed_order(self, now: float) -> tuple[int, float] | None:
        """Where this connection stands among those to shed (lowest first), or None: keep it.

        An answer the client does not read, then an idle connection, then headers sent slowly;
        neither a connection nor a request in its first :data:`GRACE`, nor one being answered.
        """
        if self.stalled_since is not None:
            return (0, self.stalled_since)
        if self._in_request or now - self.opened < GRACE:
            return None
        if self._deadline is None:
            if unread(self.transport):
                return None  # its request is there, not read yet: the reactor is behind
            return (1, self.opened)
        if now - self._requested < GRACE:
            return None
        return (2, self._requested)

    def _too_slow(self) -> None:
        self._deadline = None
        self._drop("request headers not complete within", HEADER_DEADLINE)

    def _not_reading(self) -> None:
        self._stall = None
        self._drop("it read nothing of its answer for", WRITE_DEADLINE)

    def _drop(self, why: str, seconds: float) -> None:
        log.debug(
            "Dropping {peer}: {why} {seconds}s",
            peer=str(self.transport.getPeer()),
            why=why,
            seconds=seconds,
        )
        self.transport.abortConnection()

    def _cancel_stall(self) -> None:
        self.stalled_since = None
        if self._stall is not None:
            if self._stall.active():
                self._stall.cancel()
            self._stall = None

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None

    def connectionLost(self, reason: Failure = Failure(CONNECTION_DONE)) -> None:  # noqa: B008
        """Forget the connection."""
        self._cancel_deadline()
        self._cancel_stall()
        self.site.closed(self)
        super().connectionLost(reason)


def unread(transport: Any) -> bool:
    """Whether bytes the client sent wait in its socket, unread.

    On a loaded machine the reactor can take longer than :data:`GRACE` to read a burst's
    requests (or handshakes): such a connection is not idle.
    """
    try:
        count = fcntl.ioctl(transport.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (AttributeError, OSError, ValueError):
        return False  # not a socket here (a test's transport), or already closed
    return int.from_bytes(count, sys.byteorder) > 0


class TimedRequest(Request):
    """A request that knows when it started being answered."""

    started = 0.0

    def process(self) -> None:
        """Note the time, add the site's headers, then answer."""
        site = self.channel.site  # type: ignore[attr-defined]
        self.started = site.reactor.seconds()
        for name, value in site.headers():
            self.setHeader(name, value)
        super().process()


class BoundedSite(Site):
    """A Site of :class:`BoundedChannel` connections, at most :data:`MAX_CONNECTIONS` at once."""

    protocol = BoundedChannel  # type: ignore[assignment]
    requestFactory = TimedRequest
    noisy = False
    """No "Starting factory" lines: the listener says where it serves."""

    def __init__(
        self,
        resource: IResource,
        listener: str,
        stats: HTTPStats,
        handlers: dict[bytes, str],
        reactor: Any = None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        super().__init__(resource, timeout=IDLE_TIMEOUT, reactor=reactor)
        self.listener = listener
        self._stats = stats
        self._handlers = handlers
        """Path -> handler label; any other path is ``other``."""
        self._max = max_connections
        self._open: dict[BoundedChannel, None] = {}
        """Open connections, oldest first."""
        self._port: Any = None
        """The listening port, once bound (its stopReading and startReading pause accepting)."""
        self._paused: IDelayedCall | None = None
        """While not accepting: the next look for a connection to shed."""
        self.headers: Callable[[], Iterable[tuple[str, str]]] = tuple
        """The headers added to every answer (``--tls-config``'s, which can change)."""

    def listening(self, port: IListeningPort) -> None:
        """The port this site is served on: it stops accepting while nothing can be shed."""
        self._port = port if hasattr(port, "stopReading") else None  # TCP and UNIX ports can

    def buildProtocol(self, addr: IAddress | None) -> BoundedChannel | None:  # type: ignore[override]
        """A channel for a new connection, room made for it; None closes it (no room, no port)."""
        if len(self._open) >= self._max and not self._shed_one():
            if self._port is None:
                log.warn(
                    "Refusing a connection from {peer}: {count} connections, none to shed",
                    peer=str(addr),
                    count=len(self._open),
                )
                return None
            self._pause()  # this one is already accepted: kept, one above the limit
        channel = cast(BoundedChannel, super().buildProtocol(addr))
        self._open[channel] = None
        return channel

    def closed(self, channel: BoundedChannel) -> None:
        """A connection ended: there may be room to accept again."""
        self._open.pop(channel, None)
        if self._paused is not None and len(self._open) < self._max:
            self._resume()

    def _shed_one(self) -> bool:
        now = self.reactor.seconds()
        ranked = [(order, c) for c in self._open if (order := c.shed_order(now)) is not None]
        if not ranked:
            return False
        _, shed = min(ranked, key=lambda pair: pair[0])
        del self._open[shed]
        shed.transport.abortConnection()
        return True

    def _pause(self) -> None:
        if self._paused is not None:
            return
        log.warn(
            "{count} connections on the {listener} listener, none to shed: "
            "new ones wait to be accepted",
            count=len(self._open),
            listener=self.listener,
        )
        self._port.stopReading()
        self._paused = self.reactor.callLater(GRACE, self._retry)

    def _retry(self) -> None:
        """Accept again once below the limit, shedding what can be shed to get there.

        Connections accepted in one turn of the port past the limit (a turn accepts up to its
        ``numberAccepts``) are kept; no more are accepted until the count is below it again.
        """
        self._paused = None
        while len(self._open) >= self._max and self._shed_one():
            pass
        if len(self._open) < self._max:
            self._port.startReading()
        else:
            self._paused = self.reactor.callLater(GRACE, self._retry)

    def _resume(self) -> None:
        if self._paused is not None:
            if self._paused.active():
                self._paused.cancel()
            self._paused = None
        self._port.startReading()

    def refused(self, code: int) -> None:
        """A request refused before it was read: with a body (413), a line too long (431)."""
        self._stats.answered(self.listener, "other", code, 0.0)

    def log(self, request: http.Request) -> None:
        """Count the finished request, and log it at debug level."""
        handler = self._handlers.get(request.path, "other")
        started = getattr(request, "started", 0.0)
        seconds = max(0.0, self.reactor.seconds() - started) if started else 0.0
        self._stats.answered(self.listener, handler, request.code, seconds)
        log.debug(
            "{method} {path} {code} {seconds:.3f}s {peer}",
            method=request.method.decode("ascii", "replace"),
            path=request.path.decode("ascii", "replace"),
            code=request.code,
            seconds=seconds,
            peer=str(request.getClientAddress()),
        )
