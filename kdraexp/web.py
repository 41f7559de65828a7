"""The HTTP face: ``/metrics``, ``/healthz`` and a landing page."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import cast

from klein import Klein
from prometheus_client.registry import CollectorRegistry
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IConsumer, IPushProducer, IReactorTime
from twisted.web.iweb import IRequest
from zope.interface import implementer

from kdraexp import exposition, rendering
from kdraexp.gather import CollectionFailed, Gatherer
from kdraexp.listing import ListError

LANDING_PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>kdraexp</title></head>
<body><h1>kdraexp</h1>
<p>Prometheus exporter for Kubernetes Dynamic Resource Allocation.</p>
<ul><li><a href="metrics">/metrics</a></li><li><a href="healthz">/healthz</a></li></ul>
</body></html>
"""


class ExporterApp:
    """The exporter's routes over one gatherer and one registry of self-metrics."""

    app = Klein()

    def __init__(
        self, gatherer: Gatherer, self_metrics: CollectorRegistry, clock: IReactorTime
    ) -> None:
        self._gatherer = gatherer
        self._self_metrics = self_metrics
        self._renderer = rendering.Renderer(clock)
        """Keeps each family's text compressed, shared by every scrape until the family changes."""

    @app.route("/", methods=["GET"])
    def index(self, request: IRequest) -> bytes:
        """A small page linking the two endpoints."""
        request.setHeader("Content-Type", "text/html; charset=utf-8")
        return LANDING_PAGE

    @app.route("/healthz", methods=["GET"])
    def healthz(self, request: IRequest) -> bytes:
        """Liveness: the process answers.  Never touches the API server."""
        request.setHeader("Content-Type", "text/plain; charset=utf-8")
        return b"ok\n"

    @app.route("/metrics", methods=["GET"])
    async def metrics(self, request: IRequest) -> bytes:
        """A fresh collection, or 500 with one line per failed list and no samples at all."""
        try:
            collection = await self._gatherer.gather()
        except CollectionFailed as failure:
            request.setResponseCode(500)
            request.setHeader("Content-Type", "text/plain; charset=utf-8")
            lines = dict.fromkeys(failure_line(error) for error in failure.errors)
            return "".join(line + "\n" for line in lines).encode()
        segments = await self._renderer.segments(collection)
        tail, content_type = exposition.tail(self._self_metrics, request.getHeader("Accept"))
        pieces: Iterable[bytes]
        if exposition.gzip_accepted(request.getHeader("Accept-Encoding")):
            pieces, length = self._renderer.gzip(segments, tail)
            request.setHeader("Content-Encoding", "gzip")
        else:
            pieces, length = rendering.plain(segments, tail)
        request.setHeader("Content-Type", content_type)
        request.setHeader("Vary", "Accept-Encoding")
        request.setHeader("Content-Length", str(length))
        await _BodyProducer(request, pieces).done
        return b""


def failure_line(error: ListError) -> str:
    """One line of the 500 body: no upstream text, which can hold RBAC details."""
    code = f"{error.code} " if error.code is not None else ""
    detail = f": {error.message}" if error.public and error.message else ""
    return f"list {error.resource} failed: {code}{error.reason}{detail}"


@implementer(IPushProducer)
class _BodyProducer:
    """Writes a body a piece at a time while the connection takes it, never all at once.

    The transport pauses it when its buffer is full and resumes it once drained, so a slow
    client holds a piece, not a body.
    """

    def __init__(self, request: IRequest, pieces: Iterable[bytes]) -> None:
        self._request = request
        self._pieces: Iterator[bytes] = _cut(pieces)
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
        """The client went away: write no more."""
        self._pieces = iter(())
        if not self.done.called:
            self.done.callback(None)


def _cut(pieces: Iterable[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        for start in range(0, len(piece), rendering.PIECE):
            yield piece[start : start + rendering.PIECE]
