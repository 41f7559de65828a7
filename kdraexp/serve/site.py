"""HTTP connections within bounds, whatever the clients do, and counted.

A client that sends its request headers a byte at a time is dropped once :data:`HEADER_DEADLINE`
has passed since the request's first byte.  A listener holds at most :data:`MAX_CONNECTIONS`;
past that, a new connection replaces the oldest one that is not in the middle of a request (idle
or still sending headers), so a flood of slow clients cannot keep a probe of ``/healthz`` out.
A request with a body is answered 413 as soon as its headers are read: no route takes a body,
and Twisted would otherwise spool it to a temporary file.  Each finished request is counted
by handler and code (:mod:`kdraexp.telemetry.http`) and logged at debug level, not info: a scrape
every fifteen seconds is not news.
"""

from __future__ import annotations

from typing import Any, cast

from twisted.internet.interfaces import IAddress, IDelayedCall
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
MAX_CONNECTIONS = 256
"""Open connections per listener: well under the usual limit of 1,024 open files, with room for
forty Prometheus replicas and their retries."""
_TOO_LARGE = (
    b"HTTP/1.1 413 Content Too Large\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 32\r\n"
    b"Connection: close\r\n\r\n"
    b"request bodies are not accepted\n"
)


class BoundedChannel(HTTPChannel):
    """One connection: a deadline for each request's headers, no request bodies."""

    site: BoundedSite
    transport: Any

    def connectionMade(self) -> None:
        """Count the connection (and make room for it)."""
        super().connectionMade()
        self._deadline: IDelayedCall | None = None
        self._in_request = False
        self._refused = False

    def dataReceived(self, data: bytes) -> None:
        """Start the header deadline at a request's first byte."""
        if self._refused:
            return
        if self._deadline is None and not self._in_request:
            self._deadline = self.callLater(HEADER_DEADLINE, self._too_slow)
        super().dataReceived(data)

    def allHeadersReceived(self) -> None:
        """Headers complete: stop the deadline; refuse a body before reading any of it."""
        self._cancel_deadline()
        self._in_request = True
        if self.length != 0:  # a Content-Length, or None for chunked
            self._refused = True
            self.site.refused(self)
            self.transport.write(_TOO_LARGE)
            self.transport.loseConnection()
            return
        super().allHeadersReceived()

    def requestDone(self, request: Request) -> None:
        """The answer is written: the connection may read its next request."""
        self._in_request = False
        super().requestDone(request)

    @property
    def evictable(self) -> bool:
        """Idle or still sending headers: nothing is lost by closing it."""
        return not self._in_request

    def _too_slow(self) -> None:
        self._deadline = None
        log.debug(
            "Dropping {peer}: request headers not complete within {seconds}s",
            peer=str(self.transport.getPeer()),
            seconds=HEADER_DEADLINE,
        )
        self.transport.abortConnection()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None

    def connectionLost(self, reason: Failure = Failure(CONNECTION_DONE)) -> None:  # noqa: B008
        """Forget the connection."""
        self._cancel_deadline()
        self.site.closed(self)
        super().connectionLost(reason)


class TimedRequest(Request):
    """A request that knows when it started being answered."""

    started = 0.0

    def process(self) -> None:
        """Note the time, then answer."""
        self.started = self.channel.site.reactor.seconds()  # type: ignore[attr-defined]
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

    def buildProtocol(self, addr: IAddress | None) -> BoundedChannel | None:  # type: ignore[override]
        """A channel for a new connection, or None (closing it) when full of busy ones."""
        if len(self._open) >= self._max:
            oldest = next((c for c in self._open if c.evictable), None)
            if oldest is None:
                log.warn(
                    "Refusing a connection from {peer}: {count} connections, all busy",
                    peer=str(addr),
                    count=len(self._open),
                )
                return None
            del self._open[oldest]
            oldest.transport.abortConnection()
        channel = cast(BoundedChannel, super().buildProtocol(addr))
        self._open[channel] = None
        return channel

    def closed(self, channel: BoundedChannel) -> None:
        """A connection ended."""
        self._open.pop(channel, None)

    def refused(self, channel: BoundedChannel) -> None:
        """A request came with a body."""
        self._stats.answered(self.listener, "other", 413, 0.0)

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
