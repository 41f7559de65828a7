"""TLS handshakes within bounds: a deadline each, and at most so many at once per listener.

A client that connects and sends nothing, or half a ClientHello, holds a connection no HTTP
deadline sees (a request's header deadline starts at its first decrypted byte): it stayed until
the two-minute idle timeout, and 300 of them filled the listener, which then paused accepting a
second at a time while probes of ``/healthz`` waited in the kernel's queue.  So a handshake not
complete within :data:`HANDSHAKE_DEADLINE` of the accept is dropped, and a listener holds at most
:data:`MAX_HANDSHAKES` connections in handshake: past that, the one furthest behind is shed,
once :data:`HELLO_GRACE` old: first one whose client has not sent a whole ClientHello, then one
answered that owes its reply, the longest silent first within each, one whose bytes wait
unread (the reactor behind) last.  A real client sends its ClientHello as it connects and
finishes a round trip later, so a flood of half-open handshakes sheds its own connections, not
a probe's; stalled handshakes never fill the listener.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.main import CONNECTION_DONE
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure

from kdraexp.serve.site import unread

log = Logger()

HANDSHAKE_DEADLINE = 10.0
"""Seconds from a connection's accept to the end of its TLS handshake.  Go's net/http gives the
handshake the server's ReadHeaderTimeout, so this is the request's header deadline
(:data:`~kdraexp.serve.site.HEADER_DEADLINE`): a handshake is two round trips and a signature,
done in milliseconds, a second over a bad link; ten is generous and still ends a stall 12 times
sooner than the idle timeout did."""
HELLO_GRACE = 0.2
"""Seconds a new connection is not judged: a client sends its ClientHello as it connects, and a
loaded node takes milliseconds to; a burst accepted at once must not be judged before the
reactor has read any of it."""
MAX_HANDSHAKES = 64
"""Connections in handshake at once per listener: forty Prometheus replicas reconnecting at once
fit, and a quarter of :data:`~kdraexp.serve.site.MAX_CONNECTIONS`, so stalled handshakes never
fill a listener."""


class HandshakingTLS(TLSMemoryBIOProtocol):
    """One connection over TLS, timed and counted by its factory until its handshake is done."""

    factory: BoundedTLSFactory
    transport: Any
    accepted = 0.0
    """When the connection was accepted."""
    heard = 0.0
    """When the client last sent bytes during the handshake (or connected)."""
    _deadline: IDelayedCall | None = None

    def makeConnection(self, transport: Any) -> None:  # noqa: N802 - Protocol
        """Start the handshake's deadline, room made for it among the handshakes."""
        clock = self.factory.clock
        self.accepted = self.heard = clock.seconds()
        self._deadline = clock.callLater(HANDSHAKE_DEADLINE, self._too_slow)
        self.factory.handshaking(self)
        super().makeConnection(transport)

    def dataReceived(self, data: bytes) -> None:
        """Note the client's activity while handshaking; forget the deadline once done."""
        if self._deadline is None:
            super().dataReceived(data)
            return
        self.heard = self.factory.clock.seconds()
        super().dataReceived(data)
        if self._handshakeDone:
            self.handshake_over()

    @property
    def answered(self) -> bool:
        """Whether its whole ClientHello was read and answered: the client owes the next step."""
        tls = self._tlsConnection
        return tls is not None and tls.get_cipher_name() is not None

    def handshake_over(self) -> None:
        """Done, refused or shed: no deadline, no longer counted."""
        if self._deadline is not None:
            if self._deadline.active():
                self._deadline.cancel()
            self._deadline = None
        self.factory.handshaken(self)

    def connectionLost(self, reason: Failure = Failure(CONNECTION_DONE)) -> None:  # noqa: B008
        """Forget the handshake, if it was under way."""
        self.handshake_over()
        super().connectionLost(reason)

    def _too_slow(self) -> None:
        self._deadline = None
        self.factory.handshaken(self)
        log.debug(
            "Dropping {peer}: TLS handshake not complete within {seconds}s",
            peer=str(self.transport.getPeer()),
            seconds=HANDSHAKE_DEADLINE,
        )
        self.abortConnection()


class BoundedTLSFactory(TLSMemoryBIOFactory):
    """TLS over a site's factory (which may refuse a connection), handshakes within bounds."""

    protocol = HandshakingTLS

    def __init__(
        self,
        creator: Any,
        wrapped: Any,
        clock: IReactorTime,
        max_handshakes: int = MAX_HANDSHAKES,
    ) -> None:
        super().__init__(creator, False, wrapped, clock)
        self.clock = clock
        self._max = max_handshakes
        self._handshaking: dict[HandshakingTLS, None] = {}
        """Connections in handshake, oldest first."""
        self._trimming: IDelayedCall | None = None
        """While too many handshakes are too young to judge: the next look at them."""

    def __len__(self) -> int:
        """Connections in handshake now."""
        return len(self._handshaking)

    def buildProtocol(self, addr: Any) -> HandshakingTLS | None:  # type: ignore[override]
        """The wrapped protocol over TLS, or None when the wrapped factory refuses."""
        inner = self.wrappedFactory.buildProtocol(addr)
        if inner is None:
            return None
        protocol: HandshakingTLS = self.protocol(self, inner)
        return protocol

    def handshaking(self, protocol: HandshakingTLS) -> None:
        """Count *protocol* in handshake, shedding the one furthest behind past the bound."""
        self._handshaking[protocol] = None
        if self._trimming is None:
            self._trim()

    def _trim(self) -> None:
        """Shed handshakes furthest behind until within the bound, or wait for one to be judged.

        A connection in its first :data:`HELLO_GRACE` is never shed: its client may not have
        had the time to send its ClientHello, or the reactor to read it (a burst is accepted
        in one turn).  While too many are that young, the bound is passed, and they are looked
        at again as soon as the oldest is of age.
        """
        self._trimming = None
        excess = len(self._handshaking) - self._max
        if excess <= 0:
            return
        now = self.clock.seconds()
        judged = [p for p in self._handshaking if now - p.accepted >= HELLO_GRACE]
        for shed in _furthest_behind(judged, excess):
            shed.handshake_over()
            log.debug(
                "Dropping {peer}: {count} TLS handshakes under way, it was the furthest behind",
                peer=str(shed.transport.getPeer()),
                count=self._max,
            )
            shed.abortConnection()
        if len(self._handshaking) > self._max:  # the others are too young: judged when of age
            oldest = next(iter(self._handshaking)).accepted
            self._trimming = self.clock.callLater(oldest + HELLO_GRACE - now, self._trim)

    def handshaken(self, protocol: HandshakingTLS) -> None:
        """*protocol* is out of its handshake (done, refused, dropped or lost)."""
        self._handshaking.pop(protocol, None)


def _furthest_behind(handshakes: list[HandshakingTLS], count: int) -> list[HandshakingTLS]:
    """The *count* handshakes to shed: not answered before answered, then the longest silent.

    One whose client's bytes wait unread comes after the others; the sockets are looked at in
    that order only as far as needed, so that a flood costs a look or two per connection, not
    one per handshake under way.
    """
    ranked = sorted(handshakes, key=lambda p: (p.answered, p.heard))
    chosen: list[HandshakingTLS] = []
    waiting: list[HandshakingTLS] = []
    for protocol in ranked:
        if len(chosen) == count:
            return chosen
        (waiting if unread(protocol.transport) else chosen).append(protocol)
    return (chosen + waiting)[:count]
