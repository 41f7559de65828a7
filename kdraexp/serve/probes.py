"""``--probe-listen``: ``/healthz`` and ``/readyz`` alone, in plain HTTP, for the kubelet.

The kubelet presents no client certificate and no token, so once ``--tls-config`` requires a
client certificate (``RequireAnyClientCert``, ``RequireAndVerifyClientCert``) its probes cannot
reach the listeners'.  Where no client certificate is required, ``scheme: HTTPS`` probes on the
listeners do (the kubelet does not verify the certificate); this listener serves the case they
cannot, without weakening the others: it answers whether the process runs and whether scrapes
can be answered (and which resource is not synchronised yet), never a metric.
"""

from __future__ import annotations

from typing import Any

from klein import Klein
from twisted.web.iweb import IRequest

from kdraexp.serve.web import ExporterApp


class ProbeApp:
    """The probes of the main listener, alone."""

    app = Klein()

    def __init__(self, exporter: ExporterApp) -> None:
        self._exporter = exporter

    @app.route("/healthz", methods=["GET"])
    def healthz(self, request: IRequest) -> bytes:
        """The process answers (never touches the API server)."""
        request.setHeader("Content-Type", "text/plain; charset=utf-8")
        return b"ok\n"

    @app.route("/readyz", methods=["GET"])
    def readyz(self, request: IRequest) -> Any:
        """What the main listener's ``/readyz`` answers."""
        return self._exporter.readyz(request)
