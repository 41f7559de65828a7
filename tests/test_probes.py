"""--probe-listen: the main listener's /healthz and /readyz, and nothing else."""

from __future__ import annotations

from typing import Any

from treq.testing import StubTreq

from kdraexp.serve.probes import ProbeApp
from tests.conftest import Exporter, result_of
from tests.fakeapi import Fault


def probe(exporter: Exporter, path: str) -> tuple[int, bytes]:
    web: Any = StubTreq(ProbeApp(exporter.app).app.resource())  # its methods are made at run time
    pending = web.get(f"http://exporter{path}")
    exporter.settle()
    web.flush()
    response = result_of(pending)
    content = response.content()
    web.flush()
    return response.code, result_of(content)


def test_probes_follow_the_main_listener(exporter: Exporter) -> None:
    """/readyz says what the main listener's says, 503 while the first collection runs."""
    exporter.fake.faults["resourceclaims"] = Fault(hang=True)
    exporter.app.warm(10.0)
    exporter.settle()
    assert probe(exporter, "/healthz") == (200, b"ok\n")
    assert probe(exporter, "/readyz") == (503, b"making the first collection after start\n")
    exporter.clock.advance(10)
    exporter.settle()
    assert probe(exporter, "/readyz") == (200, b"ok\n")
    exporter.gatherer.stop()


def test_nothing_else_is_served(exporter: Exporter) -> None:
    """No metric and no page: the listener reveals only whether the exporter runs and is ready."""
    for path in ("/metrics", "/", "/healthz/x"):
        assert probe(exporter, path)[0] == 404
    assert exporter.fake.lists() == []
