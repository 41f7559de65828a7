"""What the API server answers is read within bounds: size, inflation, redirects, reasons."""

from __future__ import annotations

import gzip
import json

import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.main import CONNECTION_DONE
from twisted.internet.protocol import Protocol
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from kdraexp.dra.listing import DEVICE_CLASSES, ListError
from kdraexp.kube.transport import Limits
from kdraexp.serve.web import failure_line
from tests.collect import fetch
from tests.conftest import Exporter, failure_of, in_memory_client, result_of
from tests.fakeapi import FakeKubeAPI, Fault, status


def listing(fake: FakeKubeAPI, clock: Clock, body_limit: int = 2**20) -> object:
    client, _ = in_memory_client(fake, clock, limits=Limits(body=body_limit))
    return fetch(client, DEVICE_CLASSES)


def page(count: int) -> bytes:
    items = [{"metadata": {"name": f"class-{i}", "resourceVersion": "1"}} for i in range(count)]
    return json.dumps({"items": items}).encode()


def test_gzip_asked_for_and_inflated(fake: FakeKubeAPI, clock: Clock) -> None:
    """Compressed transfer is asked for (cheaper for the API server) and inflated."""
    fake.faults["deviceclasses"] = Fault(
        200, gzip.compress(page(3)), headers={"Content-Encoding": "gzip"}
    )
    assert result_of(listing(fake, clock)).count == 3  # type: ignore[arg-type]
    assert fake.lists()[0].accept_encoding == "gzip"


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (page(20000), {}),
        (gzip.compress(page(20000)), {"Content-Encoding": "gzip"}),
        (gzip.compress(b" " * 50_000_000), {"Content-Encoding": "gzip"}),
    ],
    ids=["plain", "gzip", "gzip-bomb"],
)
def test_larger_than_the_limit_fails_the_list(
    fake: FakeKubeAPI, clock: Clock, body: bytes, headers: dict[str, str]
) -> None:
    """Past --max-response-bytes, on the wire or inflated: TooLarge, said in the 500 body."""
    fake.faults["deviceclasses"] = Fault(200, body, headers=headers)
    error = failure_of(listing(fake, clock)).value  # type: ignore[arg-type]
    assert isinstance(error, ListError)
    assert failure_line(error) == (
        "list deviceclasses failed: TooLarge: the response is larger than "
        "--max-response-bytes=1048576"
    )


def _bad_checksum() -> bytes:
    body = bytearray(gzip.compress(page(3)))
    body[-8] ^= 0xFF  # the CRC-32 of the trailer
    return bytes(body)


@pytest.mark.parametrize(
    ("body", "said"),
    [(b"not gzip at all", "incorrect header check"), (_bad_checksum(), "incorrect data check")],
    ids=["not-gzip", "bad-checksum"],
)
def test_corrupt_gzip_is_a_decode_error(
    fake: FakeKubeAPI, clock: Clock, body: bytes, said: str
) -> None:
    """A body that says gzip and is not: it arrived whole, so the list fails as Decode."""
    fake.faults["deviceclasses"] = Fault(200, body, headers={"Content-Encoding": "gzip"})
    error = failure_of(listing(fake, clock)).value  # type: ignore[arg-type]
    assert isinstance(error, ListError) and error.reason == "Decode"
    assert "cannot be inflated" in error.message and said in error.message


def test_redirects_are_not_followed(fake: FakeKubeAPI, clock: Clock) -> None:
    """A redirect is an answer, not an invitation: no request goes to the other host."""
    fake.faults["deviceclasses"] = Fault(
        302, b"", "text/plain", headers={"Location": "https://evil.example/"}
    )
    error = failure_of(listing(fake, clock)).value  # type: ignore[arg-type]
    assert isinstance(error, ListError)
    assert (error.reason, error.code) == ("Found", 302)
    assert len(fake.lists()) == 1


def test_cookies_are_not_kept(fake: FakeKubeAPI, clock: Clock) -> None:
    """A cookie the server sets is never sent back: each request carries its credential only."""
    fake.add("deviceclasses", {"metadata": {"name": "c", "resourceVersion": "1"}})
    fake.faults["deviceclasses"] = Fault(
        200, page(1), headers={"Set-Cookie": "session=abc; Path=/"}, times=1
    )
    client, _ = in_memory_client(fake, clock)
    for _ in range(2):
        assert result_of(fetch(client, DEVICE_CLASSES)).count == 1
    assert [request.cookie for request in fake.lists()] == [None, None]


def test_a_gzip_watch_is_read_line_by_line(fake: FakeKubeAPI, clock: Clock) -> None:
    """A compressed watch stream: one gzip member per flush, as kube-apiserver 1.37 sends it."""
    events = [
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": f"c{i}"}}}).encode() + b"\n"
        for i in range(3)
    ]
    fake.faults["deviceclasses"] = Fault(
        200, b"".join(map(gzip.compress, events)), headers={"Content-Encoding": "gzip"}
    )
    client, _ = in_memory_client(fake, clock)
    seen: list[str] = []
    watching = client.watch(
        DEVICE_CLASSES,
        "1",
        lambda kind, raw: seen.append(kind),
        initial=False,
        timeout_seconds=60,
    )
    result_of(Deferred.fromCoroutine(watching))
    assert seen == ["ADDED"] * 3


def test_unknown_status_reason_is_not_trusted(fake: FakeKubeAPI, clock: Clock) -> None:
    """A Status reason outside Kubernetes' set does not reach labels, bodies or logs."""
    odd = status(500, 'Evil"reason\\n{with} labels', "x")
    fake.faults["deviceclasses"] = Fault(500, odd)
    error = failure_of(listing(fake, clock)).value  # type: ignore[arg-type]
    assert isinstance(error, ListError)
    assert error.reason == "InternalServerError"


def test_abandoned_scrape_is_not_a_list_error(exporter: Exporter) -> None:
    """A client that goes away cancels the lists: nothing is counted as failed."""
    exporter.fake.faults["resourceclaims"] = Fault(hang=True)
    pending = exporter.gatherer.gather()
    pending.cancel()
    failure_of(pending).trap(CancelledError)
    exporter.settle()
    exporter.fake.faults.clear()
    _, _, body = exporter.get("/metrics")
    assert b"kube_dra_exporter_list_errors_total{" not in body


class _Recorded(Protocol):
    def __init__(self) -> None:
        self.received = b""
        self.lost: Failure | None = None

    def dataReceived(self, data: bytes) -> None:
        self.received += data

    def connectionLost(self, reason: Failure = Failure(CONNECTION_DONE)) -> None:  # noqa: B008
        self.lost = reason


@pytest.mark.parametrize(
    ("chunks", "refused"),
    [
        ([b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * 16000, b"y" * 1000 + b"\r\n"], "line"),
        ([b"HTTP/1.1 200 OK\r\n" + b"X-Filler: " + b"y" * 8000 + b"\r\n"] * 40, "headers"),
        ([b"HTTP/1.1 200 OK\r\nX-Fits: " + b"y" * 16000 + b"\r\n\r\n", b"z" * 40000], None),
    ],
    ids=["long-line", "many-lines", "long-body-line"],
)
def test_headers_past_their_bounds_are_refused_saying_which(
    chunks: list[bytes], refused: str | None
) -> None:
    """A header line past 16 KiB, or headers past the budget: the connection's loss says so.

    Twisted's parser would drop a long line's connection without a word; a body's lines are
    not headers.
    """
    from twisted.internet.error import ConnectionAborted
    from twisted.internet.protocol import Factory
    from twisted.internet.testing import StringTransport
    from twisted.protocols.policies import WrappingFactory

    from kdraexp.kube.transport import HeadersTooLarge, _HeaderBudget

    inner = _Recorded()
    wrapper = _HeaderBudget(WrappingFactory(Factory()), inner, 256 * 1024)
    transport = StringTransport()
    wrapper.makeConnection(transport)
    wrapper.write(b"GET / HTTP/1.1\r\n\r\n")
    for chunk in chunks:
        wrapper.dataReceived(chunk)
    wrapper.connectionLost(Failure(ConnectionAborted()))
    assert inner.lost is not None
    if refused is None:
        assert inner.received == b"".join(chunks) and not transport.disconnecting
        assert inner.lost.check(ConnectionAborted)
        return
    assert inner.lost.check(HeadersTooLarge)
    message = {
        "line": "a response header line is longer than 16 KiB",
        "headers": "the response headers are larger than 256 KiB",
    }[refused]
    assert str(inner.lost.value) == message


def test_a_connection_cancelled_while_being_made_is_a_cancellation() -> None:
    """Stopping while a list connects is no transport failure: nothing is logged as an error.

    A HostnameEndpoint cancelled mid-connect fails with ConnectingCancelledError, alone or among
    a connection attempt's reasons; it was logged as ``Transport: ConnectingCancelledError``.
    """
    from twisted.internet.address import HostnameAddress
    from twisted.internet.error import ConnectingCancelledError
    from twisted.python.failure import Failure
    from twisted.web._newclient import RequestGenerationFailed

    from kdraexp.kube.transport import cancelled

    connecting = Failure(ConnectingCancelledError(HostnameAddress(b"127.0.0.1", 6443)))
    assert cancelled(connecting)
    assert cancelled(Failure(RequestGenerationFailed([connecting])))
    assert not cancelled(Failure(ConnectionRefusedError()))
