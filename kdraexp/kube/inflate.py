"""Gzip bodies inflated under treq, a piece at a time and within a bound.

treq wraps every agent in Twisted's content decoder, whose gzip decoder inflates each chunk
whole: a 64 KiB chunk of a gzip bomb becomes gigabytes in one call.  The agent beneath treq
decodes instead, as Twisted's decoding agent does (the response it returns carries no
``Content-Encoding``, so treq's decoder leaves it alone), but hands the body on
:data:`INFLATE_PIECE` bytes at a time, so that the collector above can refuse it as soon as it
passes its limit, and stops inflating the moment that collector stops reading.  Bytes on the
wire that inflate to nothing are bounded too.  A body may be several gzip members one after the
other: kube-apiserver compresses a streaming list (watch-list compression, 1.37) that way,
closing a member at each flush.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Protocol
from twisted.python.components import proxyForInterface
from twisted.python.failure import Failure
from twisted.web.client import ContentDecoderAgent, ResponseDone
from twisted.web.iweb import UNKNOWN_LENGTH, IAgent, IResponse
from zope.interface import implementer

INFLATE_PIECE = 2**20
"""Bytes inflated at a time."""


class ResponseTooLarge(Exception):
    """The server sent more than the limit; the message says how much and which limit."""


class NotInflated(ValueError):
    """The body arrived but is not the gzip it says it is (bad header, data or checksum)."""


def too_large(limit: int) -> ResponseTooLarge:
    """The error for a response past *limit* bytes."""
    return ResponseTooLarge(f"the response is larger than --max-response-bytes={limit}")


def decoding_agent(agent: IAgent, limit: int) -> IAgent:
    """*agent*, asking for gzip and inflating it boundedly (at most *limit* idle wire bytes)."""
    decoder = functools.partial(_GzipResponse, limit=limit)
    decoding: IAgent = ContentDecoderAgent(agent, [(b"gzip", decoder)])
    return decoding


class _GzipResponse(proxyForInterface(IResponse)):  # type: ignore[misc]
    """A gzip response whose body is delivered inflated, a piece at a time."""

    def __init__(self, response: IResponse, limit: int) -> None:
        self.original = response
        self.length = UNKNOWN_LENGTH
        self._limit = limit

    def deliverBody(self, protocol: Protocol) -> None:  # noqa: N802 - IResponse
        """Inflate into *protocol* as the body arrives."""
        self.original.deliverBody(_Inflating(protocol, self._limit))


@implementer(IPushProducer)
class _Stoppable:
    """The body's transport as the collector sees it: stopping it also stops the inflating."""

    def __init__(self, transport: Any, stopped: Any) -> None:
        self._transport = transport
        self._stopped = stopped

    def pauseProducing(self) -> None:
        self._transport.pauseProducing()

    def resumeProducing(self) -> None:
        self._transport.resumeProducing()

    def stopProducing(self) -> None:
        self._stopped()
        self._transport.stopProducing()


class _Inflating(Protocol):
    """Inflates a gzip body into another protocol, :data:`INFLATE_PIECE` bytes at a time."""

    def __init__(self, inner: Protocol, limit: int) -> None:
        self._inner = inner
        self._limit = limit
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._idle = 0
        """Wire bytes since the last byte inflated."""
        self._stopped = False

    def makeConnection(self, transport: Any) -> None:  # noqa: N802 - IProtocol
        self.transport = transport
        self._inner.makeConnection(_Stoppable(transport, self._stop))

    def _stop(self) -> None:
        self._stopped = True

    def dataReceived(self, data: bytes) -> None:
        while data and not self._stopped:
            try:
                piece = self._inflater.decompress(data, INFLATE_PIECE)
            except zlib.error as error:
                self._fail(NotInflated(f"the gzip body cannot be inflated: {error}"))
                return
            if self._inflater.eof:  # one gzip member ends; another may follow
                rest = self._inflater.unused_data
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            else:
                rest = self._inflater.unconsumed_tail
            consumed = len(data) - len(rest)
            data = rest
            if piece:
                self._idle = 0
                self._inner.dataReceived(piece)
            else:
                self._idle += consumed
                if self._idle > self._limit:
                    self._fail(too_large(self._limit))
                    return

    def connectionLost(self, reason: Failure = Failure(ResponseDone())) -> None:  # noqa: B008
        self._stopped = True
        self._inner.connectionLost(reason)  # ignored by a collector that failed already

    def _fail(self, error: Exception) -> None:
        self._stopped = True
        if self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]
        self._inner.connectionLost(Failure(error))
