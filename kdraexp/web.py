"""The HTTP face: ``/metrics``, ``/healthz`` and a landing page."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from klein import Klein
from prometheus_client.registry import CollectorRegistry
from twisted.web.iweb import IRequest

from kdraexp import exposition
from kdraexp.gather import CollectionFailed, Gatherer
from kdraexp.metrics import Samples

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

    def __init__(self, gatherer: Gatherer, self_metrics: CollectorRegistry) -> None:
        self._gatherer = gatherer
        self._self_metrics = self_metrics
        self._renderings: WeakKeyDictionary[Samples, exposition.Rendering] = WeakKeyDictionary()
        """Scrapes sharing a collection share its rendering, for as long as one holds it."""

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
            samples = await self._gatherer.collect()
        except CollectionFailed as failure:
            request.setResponseCode(500)
            request.setHeader("Content-Type", "text/plain; charset=utf-8")
            lines = dict.fromkeys(error.summary() for error in failure.errors)
            return "".join(line + "\n" for line in lines).encode()
        rendering = self._renderings.get(samples)
        if rendering is None:
            rendering = self._renderings[samples] = exposition.Rendering(samples)
        gzip = exposition.gzip_accepted(request.getHeader("Accept-Encoding"))
        body, content_type = exposition.render(
            rendering, self._self_metrics, request.getHeader("Accept"), gzip
        )
        request.setHeader("Content-Type", content_type)
        request.setHeader("Vary", "Accept-Encoding")
        if gzip:
            request.setHeader("Content-Encoding", "gzip")
        return body
