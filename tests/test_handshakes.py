"""TLS handshakes within bounds: a deadline each, a bounded number at once, the stalled shed."""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path

import attrs
import pytest
import yaml
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.resource import Resource

from kdraexp.serve.handshakes import (
    HANDSHAKE_DEADLINE,
    HELLO_GRACE,
    MAX_HANDSHAKES,
    BoundedTLSFactory,
)
from kdraexp.serve.site import IDLE_TIMEOUT, BoundedSite
from kdraexp.serve.tlscontext import ServingTLS
from kdraexp.telemetry.http import HTTPStats
from kdraexp.telemetry.tlsstats import TLSStats
from tests.test_tlsserving import Ok, client, pair


class TCPTransport(StringTransport):
    """A StringTransport that takes TCP's no-delay option (HTTPChannel sets it)."""

    def setTcpNoDelay(self, enabled: bool) -> None:  # noqa: N802 - ITCPTransport
        pass


@attrs.define
class Client:
    """A TLS client in memory, talking to the server's side of one connection."""

    transport: StringTransport
    protocol: object
    tls: ssl.SSLObject
    outgoing: ssl.MemoryBIO
    incoming: ssl.MemoryBIO

    def hello(self) -> bytes:
        """The client's first flight (its ClientHello)."""
        with contextlib.suppress(ssl.SSLWantReadError):
            self.tls.do_handshake()
        return self.outgoing.read()

    def handshake(self) -> None:
        """Complete the handshake, carrying the bytes both ways."""
        self.send(self.hello())
        for _ in range(4):
            self.incoming.write(self.transport.value())
            self.transport.clear()
            try:
                self.tls.do_handshake()
            except ssl.SSLWantReadError:
                pass
            else:
                self.send(self.outgoing.read())
                return
            self.send(self.outgoing.read())
        raise AssertionError("the handshake did not complete")

    def request(self, data: bytes) -> None:
        """Send *data* over the connection's TLS."""
        self.tls.write(data)
        self.send(self.outgoing.read())

    def send(self, data: bytes) -> None:
        """Send *data* as it is, under TLS."""
        if data:
            self.protocol.dataReceived(data)  # type: ignore[attr-defined]


@attrs.define
class Listener:
    """A listener's TLS factory over a site, on a clock, and the connections made to it."""

    clock: Clock
    factory: BoundedTLSFactory
    ports: int = 0

    def connect(self) -> Client:
        """A new connection, accepted (its handshake not begun)."""
        self.ports += 1
        transport = TCPTransport(peerAddress=IPv4Address("TCP", "10.0.0.1", self.ports))
        protocol = self.factory.buildProtocol(transport.getPeer())
        assert protocol is not None
        protocol.makeConnection(transport)
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        tls = client().wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        return Client(transport, protocol, tls, outgoing, incoming)


@pytest.fixture
def listener(tmp_path: Path) -> Listener:
    for name, content in pair("127.0.0.1").items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "web.yml").write_text(
        yaml.safe_dump({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}})
    )
    clock = Clock()
    root = Resource()
    root.putChild(b"healthz", Ok())
    site = BoundedSite(root, "main", HTTPStats(), {b"/healthz": "healthz"}, clock)
    tls = ServingTLS(str(tmp_path / "web.yml"), clock, TLSStats())
    factory = tls.wrap(site, clock)
    assert isinstance(factory, BoundedTLSFactory)
    return Listener(clock, factory)


def test_a_silent_handshake_is_dropped_at_its_deadline(listener: Listener) -> None:
    """Connected, half a ClientHello sent: dropped at the deadline, not at the idle timeout."""
    silent = listener.connect()
    hello = silent.hello()
    silent.send(hello[: len(hello) // 2])
    listener.clock.advance(HANDSHAKE_DEADLINE - 0.1)
    assert not silent.transport.disconnected
    listener.clock.advance(0.1)
    assert silent.transport.disconnected
    assert len(listener.factory) == 0
    assert HANDSHAKE_DEADLINE < IDLE_TIMEOUT


def test_a_handshake_done_has_no_deadline(listener: Listener) -> None:
    """A client that completes its handshake is answered, however long it then waits."""
    done = listener.connect()
    done.handshake()
    assert len(listener.factory) == 0
    listener.clock.advance(HANDSHAKE_DEADLINE * 2)
    assert not done.transport.disconnected
    done.request(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    listener.clock.advance(0)
    done.incoming.write(done.transport.value())
    assert done.tls.read(4096).startswith(b"HTTP/1.1 200 OK")


def test_past_the_bound_the_handshake_furthest_behind_makes_room(listener: Listener) -> None:
    """At most MAX_HANDSHAKES at once: past that, a new one sheds the one furthest behind.

    One that never sent a whole ClientHello, the longest silent; not one answered that owes its
    reply, however long ago; never the new one.
    """
    answered = listener.connect()
    answered.send(answered.hello())  # the oldest, answered: its client owes the next step
    held = []
    for _ in range(MAX_HANDSHAKES - 1):
        listener.clock.advance(0.01)
        held.append(listener.connect())
    first = held[0]
    first.send(first.hello()[:10])  # spoke last: the second is now the longest silent
    listener.clock.advance(0.01)
    newest = listener.connect()
    assert len(listener.factory) == MAX_HANDSHAKES
    assert not answered.transport.disconnected
    assert [c.transport.disconnected for c in held[:3]] == [False, True, False]
    assert not newest.transport.disconnected
    newest.handshake()
    answered.handshake()
    assert not (newest.transport.disconnected or answered.transport.disconnected)
    assert len(listener.factory) == MAX_HANDSHAKES - 2


def test_a_burst_is_judged_once_its_clients_could_speak(listener: Listener) -> None:
    """A burst past the bound, accepted at once, is kept until HELLO_GRACE, then trimmed.

    Judged at once, a client of the burst that had not yet sent its ClientHello (a probe among
    a flood) would be shed as silent.
    """
    burst = [listener.connect() for _ in range(MAX_HANDSHAKES + 10)]
    spoke = burst[0]
    spoke.send(spoke.hello())  # answered: it is not among those shed
    listener.clock.advance(HELLO_GRACE * 0.9)
    assert not any(c.transport.disconnected for c in burst)
    listener.clock.advance(HELLO_GRACE * 0.1)
    assert [c.transport.disconnected for c in burst].count(True) == 10
    assert len(listener.factory) == MAX_HANDSHAKES
    assert not spoke.transport.disconnected
