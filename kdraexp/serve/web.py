"""The HTTP face: the main listener and the telemetry listener.

The main listener serves the DRA families, the telemetry listener the exporter's own metrics;
each has ``/metrics``, ``/healthz`` and a landing page.
"""

from __future__ import annotations

import gzip
import html
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

from klein import Klein
from prometheus_client.registry import CollectorRegistry
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IConsumer, IDelayedCall, IPushProducer, IReactorTime
from twisted.web.iweb import IRequest
from zope.interface import implementer

from kdraexp.dra.listing import ListError
from kdraexp.exposition import rendering
from kdraexp.exposition import text as exposition
from kdraexp.serve import listen
from kdraexp.sources.protocol import CollectionFailed, CollectionSource, NotSynced, Waiting

LANDING_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>kdraexp</title></head>
<body><h1>kdraexp</h1>
<p>Prometheus exporter for Kubernetes Dynamic Resource Allocation.</p>
<ul><li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li>{more}</ul>
</body></html>
"""
_HOST = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])$")
"""A Host header fit to be written back into a link (anything else gets no link)."""
HANDLERS = {b"/": "index", b"/metrics": "metrics", b"/healthz": "healthz", b"/readyz": "readyz"}
"""The routes, as the HTTP request metrics name them."""


def _landing(request: IRequest, more: str = "") -> bytes:
    """A small page linking the endpoints (*more*: list items after them)."""
    request.setHeader("Content-Type", "text/html; charset=utf-8")
    return LANDING_PAGE.format(more=more).encode()


def _main_links(request: IRequest, telemetry: str) -> str:
    """/readyz, and the telemetry listener: a link on the host asked, or what it is."""
    more = '<li><a href="readyz">/readyz</a> (scrapes can be answered)</li>'
    if not telemetry:
        return more + "<li>no telemetry listener (--telemetry-listen is empty)</li>"
    port = listen.port_of(telemetry)
    host = request.getRequestHostname().decode("ascii", "replace")
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address from the socket, not a Host header
    if port is not None and _HOST.match(host):
        where = html.escape(f"//{host}:{port}/metrics")
        return more + (
            f'<li><a href="{where}">the exporter\'s own metrics</a> '
            f"(the telemetry listener, {html.escape(telemetry)})</li>"
        )
    return more + f"<li>the exporter's own metrics: on {html.escape(telemetry)}</li>"


def _text(request: IRequest, body: bytes, code: int = 200) -> bytes:
    """A plain-text answer: *body* with *code*."""
    request.setResponseCode(code)
    request.setHeader("Content-Type", "text/plain; charset=utf-8")
    return body


def _ok(request: IRequest) -> bytes:
    return _text(request, b"ok\n")


def _front(app: Klein, links: Callable[[Any, IRequest], str]) -> None:
    """Route ``/`` and ``/healthz`` on *app*, alike on both listeners.

    ``/`` is a small page linking the endpoints, with *links* (of the listener and the request)
    after them; ``/healthz`` says the process answers, and never touches the API server.
    """

    @app.route("/", methods=["GET"])
    def index(self: Any, request: IRequest) -> bytes:
        return _landing(request, links(self, request))

    @app.route("/healthz", methods=["GET"])
    def healthz(self: Any, request: IRequest) -> bytes:
        return _ok(request)


class ExporterApp:
    """The main listener: the DRA families, over one gatherer."""

    app = Klein()

    def __init__(
        self, gatherer: CollectionSource, clock: IReactorTime, telemetry: str = ""
    ) -> None:
        self._gatherer = gatherer
        self._clock = clock
        self._telemetry = telemetry
        """--telemetry-listen, which the landing page links."""
        self._renderer = rendering.Renderer(clock)
        """Keeps each family's text compressed, shared by every scrape until the family changes."""
        self._warming: Deferred[None] | None = None
        """The collection made and rendered at start, until it ends (see :meth:`warm`)."""

    def warm(self, within: float) -> None:
        """Collect and render once now: the first scrape then costs what a calm one costs.

        A first scrape reads, joins and renders every object (at 64,000 devices, 3.3 times a
        calm one); made at start, before ``/readyz`` says ready, it costs a restart, a rollout
        or a shard taken over nothing a scrape waits for.  Lists are still made for every
        scrape: only the work on objects unchanged since is saved.  Ready once it ended,
        failed included (each failed list is logged and counted; scrapes then answer as they
        would), or after *within* seconds (``--timeout``) at most.  Nothing is made where a
        scrape could not be answered yet (watch mode, until every resource is synchronised).
        """
        if not self._gatherer.ready:
            return
        warming = Deferred.fromCoroutine(self._warm())
        if warming.called:
            return
        self._warming = warming
        ended = self._clock.callLater(within, self._warmed)
        warming.addBoth(lambda _: self._warmed(ended))

    async def _warm(self) -> None:
        try:
            collection = await self._gatherer.gather()
            await self._renderer.segments(collection)
        except (CollectionFailed, NotSynced, CancelledError):
            pass  # each failed list was logged and counted; a stopping exporter says so

    def _warmed(self, ended: IDelayedCall | None = None) -> None:
        """Ready: the first collection ended, or *ended* (its bound) has passed."""
        self._warming = None
        if ended is not None and ended.active():
            ended.cancel()

    _front(app, lambda self, request: _main_links(request, self._telemetry))

    @app.route("/readyz", methods=["GET"])
    def readyz(self, request: IRequest) -> bytes:
        """Readiness: scrapes can be answered (in watch mode, once every resource is synced).

        Ready, it says which resources' events wait a second or more to be applied.
        """
        if self._warming is not None:
            return _text(request, b"making the first collection after start\n", 503)
        if self._gatherer.ready:
            return _ok(request) + _behind(self._gatherer.behind())
        return _text(request, _waiting(self._gatherer.not_synced()), 503)

    @app.route("/metrics", methods=["GET"])
    async def metrics(self, request: IRequest) -> bytes:
        """A fresh collection, or 500 with one line per failed list and no samples at all.

        ``HEAD`` answers the headers of a successful scrape without collecting.
        """
        _, content_type = exposition.tail(request.getHeader("Accept"))
        if request.method == b"HEAD":
            request.setHeader("Content-Type", content_type)
            return b""
        try:
            collection = await self._gatherer.gather()
        except CancelledError:  # the exporter is stopping: not an error
            return _text(request, b"the exporter is stopping\n", 503)
        except NotSynced as waiting:
            return _text(request, _waiting(waiting.waiting), 503)
        except CollectionFailed as failure:
            # Answered here, not by Klein's handle_errors: its Failure keeps the traceback, whose
            # frames hold what the failed list read (a refused page of 58 MB) until a collector
            # pass; an exception caught here goes when the route returns.
            lines = dict.fromkeys(failure_line(error) for error in failure.errors)
            return _text(request, "".join(line + "\n" for line in lines).encode(), 500)
        segments = await self._renderer.segments(collection)
        tail, content_type = exposition.tail(request.getHeader("Accept"))
        pieces: Iterable[bytes]
        if exposition.gzip_accepted(request.getHeader("Accept-Encoding")):
            pieces, length = self._renderer.gzip(segments, tail)
            request.setHeader("Content-Encoding", "gzip")
        else:
            pieces, length = rendering.plain(segments, tail)
        request.setHeader("Content-Type", content_type)
        request.setHeader("Vary", "Accept, Accept-Encoding")
        request.setHeader("Content-Length", str(length))
        await _BodyProducer(request, pieces, rendering.PIECE).done
        return b""


class TelemetryApp:
    """The telemetry listener: the exporter's own metrics, which a failed list does not hide."""

    app = Klein()

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    _front(app, lambda self, request: "")

    @app.route("/metrics", methods=["GET"])
    def metrics(self, request: IRequest) -> bytes:
        """The exporter's own metrics, whatever the state of the lists."""
        body, content_type = exposition.encode_registry(self._registry, request.getHeader("Accept"))
        request.setHeader("Content-Type", content_type)
        request.setHeader("Vary", "Accept, Accept-Encoding")
        if exposition.gzip_accepted(request.getHeader("Accept-Encoding")):
            request.setHeader("Content-Encoding", "gzip")
            return gzip.compress(body, rendering.GZIP_LEVEL)
        return body


def _waiting(waiting: dict[str, Waiting]) -> bytes:
    """One line per resource not synchronised, with the failure or the step it waits on."""
    return "".join(
        f"{resource} not synchronised yet ("
        + (failure_line(on) if isinstance(on, ListError) else f"waiting for {on}")
        + ")\n"
        for resource, on in waiting.items()
    ).encode()


def _behind(behind: dict[str, tuple[float, int]]) -> bytes:
    """One line per resource whose events wait a second or more to be applied."""
    return "".join(
        f"{resource}: applying its events {seconds:.0f}s behind ({count} waiting)\n"
        for resource, (seconds, count) in behind.items()
        if seconds >= 1
    ).encode()


def failure_line(error: ListError) -> str:
    """One line of the 500 body: no upstream text, which can hold RBAC details."""
    code = f"{error.code} " if error.code is not None else ""
    detail = f": {error.message}" if error.public and error.message else ""
    return f"{error.verb} {error.resource} failed: {code}{error.reason}{detail}"


@implementer(IPushProducer)
class _BodyProducer:
    """Writes a body a piece at a time while the connection takes it, never all at once.

    The transport pauses it when its buffer is full and resumes it once drained, so a slow
    client holds a piece, not a body.
    """

    def __init__(self, request: IRequest, pieces: Iterable[bytes], size: int) -> None:
        self._request = request
        self._pieces: Iterator[bytes] = _cut(pieces, size)
        self._paused = False
        self.done: Deferred[None] = Deferred()
        self._consumer = cast(IConsumer, request)
        self._consumer.registerProducer(self, True)
        self.resumeProducing()

    def resumeProducing(self) -> None:
        """Write pieces until paused or done."""
        self._paused = False
        while not self._paused and not self.done.called:
            piece = next(self._pieces, None)
            if piece is None:
                self._consumer.unregisterProducer()
                self.done.callback(None)
                return
            self._request.write(piece)

    def pauseProducing(self) -> None:
        """The connection's buffer is full."""
        self._paused = True

    def stopProducing(self) -> None:
        """The client went away: write no more, and let go of the request.

        A request that still holds its producer when it is cleaned up logs a critical failure.
        """
        self._pieces = iter(())
        if not self.done.called:
            self._consumer.unregisterProducer()
            self.done.callback(None)


def _cut(pieces: Iterable[bytes], size: int) -> Iterator[bytes]:
    """*pieces* written at most *size* bytes at a time: long ones cut, short ones joined.

    A gzip body's pieces are its blocks, a few hundred bytes each: joined up to *size*.  A piece
    of an eighth of *size* or more (a plain body's inflated text) goes out as it is.
    """
    gathered: list[bytes] = []
    length = 0
    for piece in pieces:
        if len(piece) < size // 8 and length + len(piece) <= size:
            gathered.append(piece)
            length += len(piece)
            continue
        if length:
            yield b"".join(gathered)
        gathered, length = [], 0
        if len(piece) < size // 8:
            gathered, length = [piece], len(piece)
            continue
        for start in range(0, len(piece), size):
            yield piece[start : start + size]
    if length:
        yield b"".join(gathered)
