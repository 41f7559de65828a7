"""The HTTP contract, including the original's regression cases (successful, empty, failing)."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
import treq
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families
from treq.testing import RequestTraversalAgent, StubTreq
from twisted.web.http_headers import Headers

from kdraexp.exposition import rendering
from kdraexp.serve.web import ExporterApp
from tests.conftest import Exporter, result_of
from tests.fakeapi import Fault, status
from tests.objects import SEED_CLAIM, SEED_CLASS, SEED_LINES, SEED_SLICE, device_class

DRA_PREFIXES = (
    "kube_resourceclaim_",
    "kube_resourceslice_",
    "kube_deviceclass_",
    "kube_resourcepool_",
)
ORIGINAL_SEVEN = {line.split("{")[0] for line in SEED_LINES}


def seed(exporter: Exporter) -> None:
    exporter.fake.add("resourceclaims", SEED_CLAIM)
    exporter.fake.add("resourceslices", SEED_SLICE)
    exporter.fake.add("deviceclasses", SEED_CLASS)


def test_successful_scrape_lines(exporter: Exporter) -> None:
    """The original's successful scrape: every exact line, all lists cluster-wide."""
    seed(exporter)
    code, headers, body = exporter.get("/metrics")
    assert code == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    lines = body.decode().splitlines()
    for line in SEED_LINES:
        assert line in lines
    assert sorted(r.plural for r in exporter.fake.requests) == [
        "deviceclasses",
        "resourceclaims",
        "resourceslices",
    ]
    for request in exporter.fake.requests:
        assert request.method == "GET"
        assert set(request.args) == {"limit"}


def test_dra_families_sorted_and_typed(exporter: Exporter) -> None:
    """Families are written sorted by name, each with HELP and TYPE gauge."""
    seed(exporter)
    _, _, body = exporter.get("/metrics")
    families = [
        f for f in text_string_to_metric_families(body.decode()) if f.name.startswith(DRA_PREFIXES)
    ]
    assert [f.name for f in families] == sorted(f.name for f in families)
    assert {f.name for f in families} >= ORIGINAL_SEVEN
    assert {f.type for f in families} == {"gauge"}


def test_empty_cluster(exporter: Exporter) -> None:
    """An empty cluster is a successful scrape without DRA samples."""
    code, _, body = exporter.get("/metrics")
    assert code == 200
    assert not [line for line in body.decode().splitlines() if line.startswith(DRA_PREFIXES)]


@pytest.mark.parametrize("plural", ["resourceclaims", "resourceslices", "deviceclasses"])
@pytest.mark.parametrize(
    ("code", "reason", "message"),
    [(403, "Forbidden", "denied"), (503, "ServiceUnavailable", "API unavailable")],
)
def test_failure_fails_scrape(
    exporter: Exporter, plural: str, code: int, reason: str, message: str
) -> None:
    """Any failed list: 500, no sample at all, one line naming it; /healthz stays 200."""
    exporter.fake.add("deviceclasses", device_class("gpu", "2.5"))
    exporter.fake.faults[plural] = Fault(code, status(code, reason, message))
    status_code, headers, body = exporter.get("/metrics")
    assert status_code == 500
    assert headers["content-type"].startswith("text/plain")
    assert body.decode() == f"list {plural} failed: {code} {reason}\n"
    assert b"kube_deviceclass_hourly_cost{" not in body
    assert b"denied" not in body
    assert exporter.get("/healthz")[:3:2] == (200, b"ok\n")


def test_errors_counted_while_they_last(exporter: Exporter) -> None:
    """list_errors_total is on the telemetry listener while /metrics fails."""
    exporter.fake.faults["resourceslices"] = Fault(403, status(403, "Forbidden", "no"))
    assert exporter.get("/metrics")[0] == 500
    code, _, body = exporter.get("/metrics", telemetry=True)
    assert code == 200
    assert (
        'kube_dra_exporter_list_errors_total{reason="Forbidden",resource="resourceslices"} 1.0'
        in body.decode().splitlines()
    )


def test_self_metrics(exporter: Exporter) -> None:
    """Build info, list sizes, process and Python metrics: on the telemetry listener only."""
    seed(exporter)
    _, _, dra = exporter.get("/metrics")
    assert {line.split("{")[0].split(" ")[0] for line in dra.decode().splitlines()} & {
        "kube_dra_exporter_build_info",
        "process_cpu_seconds_total",
    } == set()
    _, headers, body = exporter.get("/metrics", telemetry=True)
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {
        "kube_dra_exporter_build_info",
        "kube_dra_exporter_list_duration_seconds",
        "kube_dra_exporter_list_objects",
        "kube_dra_exporter_list_errors",
        "python_info",
        "python_gc_objects_collected",
    } <= names
    assert "kube_dra_exporter_collection_timeout_seconds 10.0" in body.decode().splitlines()
    assert any(name.startswith("process_") for name in names)
    assert 'kube_dra_exporter_list_objects{resource="resourceclaims"} 1.0' in body.decode()
    assert exporter.get("/healthz", telemetry=True)[::2] == (200, b"ok\n")
    code, _, page = exporter.get("/", telemetry=True)
    assert code == 200 and b'href="metrics"' in page and b"readyz" not in page


def test_head_does_not_collect(exporter: Exporter) -> None:
    """HEAD /metrics answers the headers without listing anything."""
    response = result_of(exporter.web.head("http://exporter/metrics"))
    assert response.code == 200
    assert response.headers.getRawHeaders(b"Content-Type")[0].startswith(b"text/plain")
    assert exporter.fake.requests == []


def test_openmetrics(exporter: Exporter) -> None:
    """OpenMetrics when asked for, parseable, ending in # EOF once."""
    seed(exporter)
    code, headers, body = exporter.get(
        "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert code == 200
    assert headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    text = body.decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    families = {f.name: f for f in parse_om(text)}
    assert families["kube_deviceclass_hourly_cost"].samples[0].value == 2.5


def test_gzip(exporter: Exporter) -> None:
    """gzip when Accept-Encoding allows it, identity when it refuses it."""
    seed(exporter)
    raw = RequestTraversalAgent(exporter.resource)  # treq would decode gzip for us
    response = result_of(
        raw.request(
            b"GET", b"http://exporter/metrics", Headers({b"Accept-Encoding": [b"gzip, deflate"]})
        )
    )
    assert response.headers.getRawHeaders(b"Content-Encoding") == [b"gzip"]
    assert response.headers.getRawHeaders(b"Vary") == [b"Accept, Accept-Encoding"], (
        "the body follows Accept (text or OpenMetrics) as well as Accept-Encoding"
    )
    body = gzip.decompress(result_of(treq.content(response)))
    assert SEED_LINES[0].encode() in body.splitlines()
    response = result_of(
        raw.request(
            b"GET", b"http://exporter/metrics", Headers({b"Accept-Encoding": [b"gzip;q=0"]})
        )
    )
    assert response.headers.getRawHeaders(b"Content-Encoding") is None
    assert SEED_LINES[0].encode() in result_of(treq.content(response)).splitlines()


def test_healthz_never_lists(exporter: Exporter) -> None:
    """/healthz answers ok without any API request."""
    code, headers, body = exporter.get("/healthz")
    assert (code, body) == (200, b"ok\n")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert exporter.fake.requests == []


def test_landing_page(exporter: Exporter) -> None:
    """/ links /metrics, /healthz, /readyz and the telemetry listener on the host asked."""
    code, _, body = exporter.get("/")
    assert code == 200
    assert b'href="metrics"' in body and b'href="healthz"' in body
    assert b'href="readyz"' in body
    assert b'href="//exporter:8081/metrics"' in body


@pytest.mark.parametrize(
    ("telemetry", "host", "shown"),
    [
        ("", "exporter", b"no telemetry listener (--telemetry-listen is empty)"),
        ("unix:/run/t.sock", "exporter", b"the exporter's own metrics: on unix:/run/t.sock"),
        ("127.0.0.1:9", "[::1]:8080", b'href="//[::1]:9/metrics"'),
        (":9", "<script>", b"the exporter's own metrics: on :9"),
    ],
)
def test_landing_page_telemetry(
    exporter: Exporter, telemetry: str, host: str, shown: bytes
) -> None:
    """No telemetry listener, one on a socket, a Host in IPv6, a Host unfit for a link."""
    page: Any = StubTreq(ExporterApp(exporter.gatherer, exporter.clock, telemetry).app.resource())
    response = result_of(page.get("http://exporter/", headers={"Host": host}))
    assert response.code == 200
    assert shown in result_of(response.content())


@pytest.mark.parametrize("path", ["/metrics/", "/nope", "/healthz/x"])
def test_unknown_paths(exporter: Exporter, path: str) -> None:
    """Other paths are 404."""
    assert exporter.get(path)[0] == 404


def test_other_methods(exporter: Exporter) -> None:
    """POST is 405."""
    response = result_of(exporter.web.post("http://exporter/metrics", data=b""))
    assert response.code == 405
    assert exporter.fake.requests == []


def test_collections_released_after_scrape(exporter: Exporter) -> None:
    """Between scrapes only the rows, the compressed families and the last collection are kept.

    The last collection is the store's entries put together (no copy of a row): a scrape of an
    unchanged cluster answers with it.
    """
    import gc

    from kdraexp.store.collection import Collection

    def alive() -> int:
        gc.collect()
        return len([o for o in gc.get_objects() if isinstance(o, Collection)])

    before = alive()  # an earlier test's gatherer may still hold its last one
    seed(exporter)
    for _ in range(3):
        assert exporter.get("/metrics", {"Accept-Encoding": "gzip"})[0] == 200
    assert alive() - before <= 1


@given(st.lists(st.sampled_from([0, 1, 300, 65535, 65536, 65537, 200_000]), max_size=12))
def test_pieces_cut_and_joined(sizes: list[int]) -> None:
    """A body goes out in pieces of at most 64 KiB, small ones (blocks) joined, nothing lost."""
    from kdraexp.exposition import rendering
    from kdraexp.serve.web import _cut

    parts = [bytes([index % 251]) * size for index, size in enumerate(sizes)]
    pieces = list(_cut(parts, rendering.PIECE))
    assert b"".join(pieces) == b"".join(parts)
    assert all(0 < len(piece) <= rendering.PIECE for piece in pieces)
    small = [size for size in sizes if 0 < size <= 300]
    if len(small) > 1 and len(small) == len([s for s in sizes if s]):
        assert len(pieces) == 1, "small parts go out together"


def test_the_first_collection_is_made_at_start_and_ready_follows_it(
    exporter: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warmed at start, the exporter lists and renders; /readyz says ready once that ended.

    The first scrape then reads only what changed since: with nothing changed, its lists are
    made again and answered from the collection and text made at start.
    """
    exporter.fake.add("deviceclasses", device_class("gpu", "3"))
    exporter.fake.faults["resourceclaims"] = Fault(hang=True)
    exporter.app.warm(10.0)
    exporter.settle()
    assert len(exporter.fake.lists()) == 3
    code, _, body = exporter.get("/readyz")
    assert (code, body) == (503, b"making the first collection after start\n")
    exporter.fake.faults.clear()
    exporter.fake.hanging.pop().callback(b'{"items": []}')
    exporter.settle()
    assert exporter.get("/readyz")[0] == 200
    rendered: list[str] = []
    render = rendering.Renderer._render

    def counting(renderer: rendering.Renderer, collection: Any, name: str, key: Any) -> Any:
        rendered.append(name)
        return render(renderer, collection, name, key)

    monkeypatch.setattr(rendering.Renderer, "_render", counting)
    code, _, body = exporter.get("/metrics")
    assert code == 200 and b'kube_deviceclass_hourly_cost{deviceclass_name="gpu"} 3\n' in body
    assert len(exporter.fake.lists()) == 6, "a scrape lists again"
    assert rendered == [], "what was rendered at start is written"


def test_ready_after_the_timeout_of_a_first_collection_that_hangs(exporter: Exporter) -> None:
    """A first collection that hangs makes the exporter ready after --timeout at most.

    Readiness waits for the collection made at start, not for the API server: a rollout does
    not hang on an API that stalls, and scrapes then answer as they would.
    """
    exporter.fake.faults["resourceclaims"] = Fault(hang=True)
    exporter.app.warm(10.0)
    exporter.settle()
    assert exporter.get("/readyz")[0] == 503
    exporter.clock.advance(10)
    exporter.settle()
    assert exporter.get("/readyz")[0] == 200
    exporter.gatherer.stop()


def test_ready_after_a_first_collection_that_failed(exporter: Exporter) -> None:
    """Refused lists end the collection made at start: ready, and scrapes answer 500 as always."""
    exporter.fake.faults["resourceclaims"] = Fault(403, {"reason": "Forbidden", "code": 403})
    exporter.app.warm(10.0)
    exporter.settle()
    assert exporter.get("/readyz")[0] == 200
    assert exporter.get("/metrics")[0] == 500
