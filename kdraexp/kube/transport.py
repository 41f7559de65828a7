"""Connections to the API server, and reading what it answers within bounds.

Whatever the server sends (a body that never ends, a 500 MB body, a gzip bomb, endless
headers), the exporter reads at most :class:`Limits` of it and drops the connection past that;
a cancelled read (the collection's deadline) aborts the connection at once and keeps nothing.
Redirects are never followed (the client certificate must not be offered to another host) and
no cookie is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.error import ConnectingCancelledError
from twisted.internet.interfaces import IProtocol, IProtocolFactory, IStreamClientEndpoint
from twisted.internet.main import CONNECTION_DONE
from twisted.internet.protocol import Protocol
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from twisted.web.client import URI, ResponseDone
from twisted.web.http import PotentialDataLoss
from twisted.web.iweb import IAgentEndpointFactory, IPolicyForHTTPS, IResponse
from zope.interface import implementer

from kdraexp.dra.listing import DEFAULT_MAX_RESPONSE_BYTES
from kdraexp.kube.inflate import ResponseTooLarge, too_large
from kdraexp.util.reactor import IKdraReactor

T = TypeVar("T")
HEADER_LIMIT = 256 * 1024
"""Bytes of status line and headers a response may have."""


@attrs.frozen
class Limits:
    """How much of one response is read."""

    body: int = DEFAULT_MAX_RESPONSE_BYTES
    """Bytes of body, inflated if it came compressed (:mod:`kdraexp.kube.inflate`)."""
    headers: int = HEADER_LIMIT


class _Bounded(Protocol, Generic[T]):
    """Reads one response body within a bound, as treq's collectors do, into :attr:`done`.

    A failure (past the bound, a handler's refusal) or a cancellation drops the connection and
    what was held at once; the end of the body fires :attr:`done` with :meth:`result`.
    """

    def __init__(self) -> None:
        self._stopped = False
        self.done: Deferred[T] = Deferred(canceller=self._cancel)

    def received(self, data: bytes) -> None:
        """Take a piece of the body (not called once stopped)."""
        raise NotImplementedError

    def result(self) -> T:
        """What the body gave, once it has ended."""
        raise NotImplementedError

    def drop(self) -> None:
        """Forget what is held."""
        raise NotImplementedError

    def dataReceived(self, data: bytes) -> None:
        if not self._stopped:
            self.received(data)

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:  # noqa: B008
        if self._stopped:
            return
        self._stopped = True
        if reason.check(ResponseDone, PotentialDataLoss):
            self.done.callback(self.result())
        else:
            self.done.errback(reason)
        self.drop()

    def fail(self, error: Exception) -> None:
        """End the body with *error*: the connection is dropped."""
        self._stopped = True
        self.drop()
        self._abort()
        self.done.errback(error)

    def _cancel(self, _: Deferred[T]) -> None:
        self._stopped = True
        self.drop()
        self._abort()

    def _abort(self) -> None:
        if self.transport is not None:
            # The client's body transport (an IPushProducer): stopping it drops the connection.
            self.transport.stopProducing()  # type: ignore[attr-defined]


class _Body(_Bounded[bytearray]):
    """Collects one response body within the limit (inflated already, if it came gzipped)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self._limit = limit
        self._data = bytearray()

    def received(self, data: bytes) -> None:
        self._data += data
        if len(self._data) > self._limit:
            self.fail(too_large(self._limit))

    def result(self) -> bytearray:
        return self._data  # not copied: a list page may be tens of MiB

    def drop(self) -> None:
        self._data = bytearray()


def read_body(response: IResponse, limit: int) -> Deferred[bytearray]:
    """The whole body of *response*, at most *limit* bytes.

    Cancelling the Deferred drops the connection and what was read.

    :raises ResponseTooLarge: past the limit.
    """
    body = _Body(limit)
    response.deliverBody(body)
    if isinstance(response.length, int) and response.length > limit:
        body.fail(too_large(limit))  # said so before sending it: read none of it
    return body.done


class HeadersTooLarge(Exception):
    """The response's headers run past a bound; the message says which."""


LINE_LIMIT = 16 * 1024
"""A header line's bytes at most: Twisted's HTTP parser drops a longer line's connection
without a word, which would read as the server closing it."""


class _HeaderBudget(ProtocolWrapper):
    """Drops a connection whose response headers run past the budget, saying so.

    Twisted's HTTP parser bounds each header line but not their number: counted here, from
    each request sent until the blank line that ends the response's headers.  A line past
    :data:`LINE_LIMIT` is refused here too, before the parser drops it silently.
    """

    def __init__(self, factory: WrappingFactory[Any], protocol: IProtocol, budget: int) -> None:
        super().__init__(factory, protocol)
        self._budget = budget
        self._counting = False
        self._seen = 0
        self._line = 0
        """Bytes of the header line under way."""
        self._tail = b""
        self._refused: HeadersTooLarge | None = None

    def write(self, data: bytes) -> None:
        self._counting, self._seen, self._line, self._tail = True, 0, 0, b""
        super().write(data)

    def writeSequence(self, data: list[bytes]) -> None:
        self._counting, self._seen, self._line, self._tail = True, 0, 0, b""
        super().writeSequence(data)

    def dataReceived(self, data: bytes) -> None:
        if self._counting:
            window = self._tail + data
            end = window.find(b"\r\n\r\n")
            head = data if end < 0 else data[: max(0, end - len(self._tail))]
            if self._longest_line(head) > LINE_LIMIT:
                self._refuse(f"a response header line is longer than {LINE_LIMIT // 1024} KiB")
                return
            if end >= 0:
                self._counting = False
            else:
                self._seen += len(data)
                self._tail = window[-3:]
                if self._seen > self._budget:
                    self._refuse(f"the response headers are larger than {self._budget // 1024} KiB")
                    return
        super().dataReceived(data)

    def _longest_line(self, head: bytes) -> int:
        """The longest line *head* ends or continues (without its CR), keeping the last open."""
        parts = head.split(b"\n")
        first = self._line + len(parts[0])
        if len(parts) == 1:
            self._line = first
            return first
        self._line = len(parts[-1])
        ended = [first - parts[0].endswith(b"\r")]
        ended.extend(len(part) - part.endswith(b"\r") for part in parts[1:-1])
        return max(self._line, *ended)

    def _refuse(self, why: str) -> None:
        self._refused = HeadersTooLarge(why)
        assert self.transport is not None
        self.transport.abortConnection()  # type: ignore[attr-defined]

    def connectionLost(self, reason: Failure = Failure(CONNECTION_DONE)) -> None:  # noqa: B008
        """Lost because the headers were refused: say why, not that the connection was lost."""
        super().connectionLost(Failure(self._refused) if self._refused else reason)


@implementer(IStreamClientEndpoint)
class _BudgetedEndpoint:
    def __init__(self, endpoint: IStreamClientEndpoint, budget: int) -> None:
        self._endpoint = endpoint
        self._budget = budget

    def connect(self, factory: IProtocolFactory) -> Deferred[IProtocol]:
        wrapping: WrappingFactory[Any] = WrappingFactory(factory)
        budget = self._budget
        wrapping.protocol = lambda wrapper, wrapped: _HeaderBudget(wrapper, wrapped, budget)
        connected: Deferred[IProtocol] = self._endpoint.connect(wrapping)

        def unwrapped(wrapper: IProtocol) -> IProtocol:
            # The agent speaks to its own protocol, not to the wrapper counting for it.
            return wrapper.wrappedProtocol  # type: ignore[attr-defined,no-any-return]

        return connected.addCallback(unwrapped)


@implementer(IAgentEndpointFactory)
class EndpointFactory:
    """Endpoints to the API server: TCP (IPv4 or IPv6), TLS by the given policy, headers bounded."""

    def __init__(self, reactor: IKdraReactor, policy: IPolicyForHTTPS, limits: Limits) -> None:
        self._reactor = reactor
        self._policy = policy
        self._limits = limits

    def endpointForURI(self, uri: URI) -> IStreamClientEndpoint:
        """The endpoint for one API server address."""
        host = uri.host.decode("ascii")
        endpoint: IStreamClientEndpoint = HostnameEndpoint(self._reactor, host, uri.port)
        if uri.scheme == b"https":
            creator = self._policy.creatorForNetloc(uri.host, uri.port)
            endpoint = wrapClientTLS(creator, endpoint)
        return _BudgetedEndpoint(endpoint, self._limits.headers)


def cancelled(failure: Failure) -> bool:
    """Whether a transport failure is in fact a cancellation (the collection was abandoned).

    A connection being made when it is cancelled fails with ``ConnectingCancelledError``.
    """
    if failure.check(CancelledError, ConnectingCancelledError):
        return True
    reasons = getattr(failure.value, "reasons", None) or ()
    return any(isinstance(reason, Failure) and cancelled(reason) for reason in reasons)


class _Lines(_Bounded[None]):
    """Delivers a streamed body (a watch) line by line, each line at most *limit* bytes."""

    def __init__(self, limit: int, on_line: Callable[[bytes], None]) -> None:
        super().__init__()
        self._limit = limit
        self._on_line = on_line
        self._partial = bytearray()

    def received(self, data: bytes) -> None:
        start = 0
        while not self._stopped:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._partial:
                self._partial += data[start:end]
                line = bytes(self._partial)
                self._partial = bytearray()
            else:
                line = data[start:end]
            start = end + 1
            if line.strip():
                try:
                    self._on_line(line)
                except Exception as error:  # the handler refused the line: end the stream
                    self.fail(error)
                    return
        self._partial += data[start:]
        if len(self._partial) > self._limit:
            self.fail(
                ResponseTooLarge(f"a watch event is larger than --max-response-bytes={self._limit}")
            )

    def result(self) -> None:
        return None

    def drop(self) -> None:
        self._partial = bytearray()


def read_lines(response: IResponse, limit: int, on_line: Callable[[bytes], None]) -> Deferred[None]:
    """Hand each line of *response*'s body to *on_line* as it arrives; fire when it ends.

    Cancelling drops the connection.  An exception from *on_line* ends the stream with it.

    :raises ResponseTooLarge: for a line past *limit* bytes.
    """
    lines = _Lines(limit, on_line)
    response.deliverBody(lines)
    return lines.done
