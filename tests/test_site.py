"""HTTP connections within bounds: slow headers, too many connections, request bodies, counts."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.registry import CollectorRegistry
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.pages import notFound
from twisted.web.resource import Resource

from kdraexp.serve import site as httpsite
from kdraexp.serve.site import GRACE, HEADER_DEADLINE, WRITE_DEADLINE, BoundedChannel, BoundedSite
from kdraexp.telemetry.http import HTTPStats

HANDLERS = {b"/healthz": "healthz"}


class Ok(Resource):
    isLeaf = True  # noqa: N815

    def render_GET(self, request: object) -> bytes:  # noqa: N802
        return b"ok\n"


class Root(Resource):
    def getChild(self, path: bytes, request: object) -> Resource:  # noqa: N802
        return notFound()  # type: ignore[return-value]


def site(clock: Clock, stats: HTTPStats | None = None, limit: int = 4) -> BoundedSite:
    root = Root()
    root.putChild(b"healthz", Ok())
    return BoundedSite(root, "main", stats or HTTPStats(), HANDLERS, clock, limit)


def connect(server: BoundedSite, port: int = 1) -> tuple[BoundedChannel | None, StringTransport]:
    transport = StringTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", port))
    channel = server.buildProtocol(transport.getPeer())
    if channel is not None:
        channel.makeConnection(transport)
    return channel, transport


def test_headers_a_byte_at_a_time_are_cut_off() -> None:
    """The deadline runs from a request's first byte, however often bytes trickle in."""
    clock = Clock()
    channel, transport = connect(site(clock))
    assert channel is not None
    for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100:
        channel.dataReceived(bytes([byte]))
        clock.advance(HEADER_DEADLINE / 40)
        if transport.disconnected:
            break
    assert transport.disconnected
    assert transport.value() == b""


def test_idle_connection_has_no_header_deadline() -> None:
    """A kept-alive connection waiting for its next request is not cut by the deadline."""
    clock = Clock()
    channel, transport = connect(site(clock))
    assert channel is not None
    channel.dataReceived(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 200 OK")
    clock.advance(HEADER_DEADLINE * 2)
    assert not transport.disconnected
    transport.clear()
    channel.dataReceived(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 200 OK")


def test_new_connection_replaces_oldest_idle_one() -> None:
    """At the limit, a new connection (a probe) replaces the oldest idle or slow one."""
    clock = Clock()
    server = site(clock, limit=3)
    slow = [connect(server, port) for port in range(3)]
    for channel, _ in slow:
        assert channel is not None
        channel.dataReceived(b"GET /hea")
    clock.advance(GRACE)
    probe, transport = connect(server, 99)
    assert probe is not None
    assert [t.disconnected for _, t in slow] == [True, False, False]
    probe.dataReceived(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 200 OK")


def test_busy_connections_are_kept() -> None:
    """Connections in the middle of a request are not replaced: the new one is refused."""
    clock = Clock()
    root = Resource()

    class Never(Resource):
        isLeaf = True  # noqa: N815

        def render_GET(self, request: object) -> object:  # noqa: N802
            from twisted.web.server import NOT_DONE_YET

            return NOT_DONE_YET

    root.putChild(b"slow", Never())
    server = BoundedSite(root, "main", HTTPStats(), {}, clock, 2)
    busy = [connect(server, port) for port in range(2)]
    for channel, _ in busy:
        assert channel is not None
        channel.dataReceived(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
    refused, _ = connect(server, 99)
    assert refused is None
    assert not any(t.disconnected for _, t in busy)


class Port:
    """What the site needs of a listening port: to stop and start accepting."""

    accepting = True

    def stopReading(self) -> None:  # noqa: N802
        self.accepting = False

    def startReading(self) -> None:  # noqa: N802
        self.accepting = True


def test_answer_not_read_is_dropped_after_the_write_deadline() -> None:
    """A client that leaves the send buffers full is cut off; one that reads is not."""
    clock = Clock()
    server = site(clock)
    stalled, stalled_transport = connect(server, 1)
    reading, reading_transport = connect(server, 2)
    assert stalled is not None and reading is not None
    stalled.pauseProducing()  # as the transport does when its buffer is full
    reading.pauseProducing()
    clock.advance(WRITE_DEADLINE - 1)
    reading.resumeProducing()  # it read: the buffers drained
    clock.advance(1)
    assert stalled_transport.disconnected and not reading_transport.disconnected
    clock.advance(WRITE_DEADLINE)
    assert not reading_transport.disconnected


class Refilling:
    """An answer's producer that fills the buffers again as soon as it is resumed."""

    def __init__(self, channel: BoundedChannel) -> None:
        self.channel = channel
        self.resumed = 0

    def resumeProducing(self) -> None:
        self.resumed += 1
        self.channel.pauseProducing()  # as the transport does when the buffers fill again

    def pauseProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


def test_deadline_starts_over_when_a_resume_fills_the_buffers_again() -> None:
    """A client that read once and then nothing more is dropped a deadline after its read.

    Resuming writes until the buffers fill, which pauses again within the same call: that pause
    must arm the deadline, not be forgotten when the resume ends.
    """
    clock = Clock()
    server = site(clock)
    channel, transport = connect(server)
    assert channel is not None
    producer = Refilling(channel)
    channel.registerProducer(producer, True)
    channel.pauseProducing()
    clock.advance(WRITE_DEADLINE - 1)
    channel.resumeProducing()  # it read a little: the answer flows and fills the buffers again
    assert producer.resumed == 1 and channel.stalled_since == clock.seconds()
    clock.advance(WRITE_DEADLINE - 1)
    assert not transport.disconnected
    clock.advance(1)
    assert transport.disconnected


def test_the_stalled_are_shed_first_and_the_new_never() -> None:
    """Shed order: not reading, then idle, then slow headers; a young connection is kept."""
    clock = Clock()
    server = site(clock, limit=4)
    idle, idle_t = connect(server, 1)
    headers, headers_t = connect(server, 2)
    stalled, stalled_t = connect(server, 3)
    assert idle is not None and headers is not None and stalled is not None
    clock.advance(2 * GRACE)
    headers.dataReceived(b"GET /hea")
    stalled.pauseProducing()
    clock.advance(2 * GRACE)
    _, young_t = connect(server, 4)
    sheds = []
    for port in (5, 6, 7):
        connect(server, port)
        sheds.append([t.disconnected for t in (stalled_t, idle_t, headers_t, young_t)])
    assert sheds == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
    ]


def test_nothing_to_shed_stops_accepting_until_room() -> None:
    """Full of new or busy connections: accept no more (clients wait), and again once one ends."""
    clock = Clock()
    server = site(clock, limit=2)
    port = Port()
    server.listening(port)  # type: ignore[arg-type]
    first, first_t = connect(server, 1)
    connect(server, 2)
    assert port.accepting
    third, _ = connect(server, 3)  # already accepted by the kernel: kept, one above
    assert third is not None and not port.accepting
    clock.advance(GRACE / 2)
    assert not port.accepting
    assert first is not None
    first_t.loseConnection()
    first.connectionLost()
    assert not port.accepting  # still at the limit with three open
    clock.advance(GRACE)  # the others are no longer new: one can be shed
    assert port.accepting


def test_request_body_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A body is answered 413 on its headers: nothing read, nothing spooled to a file."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    clock = Clock()
    stats = HTTPStats()
    for headers in (b"Content-Length: 200000000", b"Transfer-Encoding: chunked"):
        channel, transport = connect(site(clock, stats))
        assert channel is not None
        channel.dataReceived(b"POST /metrics HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n\r\n")
        channel.dataReceived(b"x" * 1_000_000)
        assert transport.value().startswith(b"HTTP/1.1 413 Content Too Large\r\n")
        assert transport.value().endswith(b"\r\n\r\nrequest bodies are not accepted\n")
        assert transport.disconnecting
    assert list(tmp_path.iterdir()) == []
    assert stats._requests[("main", "other", "413")] == 2


def test_requests_counted_by_handler_and_code() -> None:
    """Each answer counts once by handler and code, with its duration in the histogram."""
    clock = Clock()
    stats = HTTPStats()
    channel, _ = connect(site(clock, stats))
    assert channel is not None
    for path in (b"/healthz", b"/healthz", b"/nope"):
        channel.dataReceived(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    registry = CollectorRegistry()
    registry.register(stats)
    value = registry.get_sample_value
    requests = "kube_dra_exporter_http_requests_total"
    assert value(requests, {"listener": "main", "handler": "healthz", "code": "200"}) == 2
    assert value(requests, {"listener": "main", "handler": "other", "code": "404"}) == 1
    duration = "kube_dra_exporter_http_request_duration_seconds"
    labels = {"listener": "main", "handler": "healthz"}
    assert value(f"{duration}_count", labels) == 2
    assert value(f"{duration}_bucket", {**labels, "le": "0.005"}) == 2
    assert value(f"{duration}_bucket", {**labels, "le": "+Inf"}) == 2


def test_limit_is_below_usual_open_file_limit() -> None:
    """Two listeners at their limits, and the API connections, fit in 1,024 open files."""
    assert 2 * httpsite.MAX_CONNECTIONS + 64 < 1024
