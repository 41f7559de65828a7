"""Where the exporter listens: ``--listen`` and ``--telemetry-listen`` values.

An operator writes what Go servers take: ``:8080`` (every address, IPv4 and IPv6), ``8080``,
``127.0.0.1:8080``, ``[::1]:8080``, ``localhost:8080``; a Twisted endpoint description
(``tcp:8080:interface=...``, ``unix:...``) is taken as it is, and so is a value whose host is
the name of a Twisted endpoint type (``tcp:8080``).  A host name is resolved when the value is
read (a name that does not resolve is refused there, with the resolver's words) and its first
IPv4 address is bound, else its first IPv6 one: one address, as an address is.
Every address means one IPv6 socket that also accepts IPv4 (``IPV6_V6ONLY`` off, whatever the
host's default); on a host without IPv6 it is an IPv4 socket, and the log says so.
"""

from __future__ import annotations

import errno
import re
import socket
from typing import cast

import attrs
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import (
    TCP4ServerEndpoint,
    TCP6ServerEndpoint,
    serverFromString,
)
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger
from zope.interface import implementer

from kdraexp.util.reactor import IKdraReactor

log = Logger()

BACKLOG = 2048
"""Connections the kernel completes and queues while the listener is not accepting (it pauses
at its connection limit): a burst waits there instead of losing SYNs to retries (the kernel
caps it at net.core.somaxconn, 4,096 by default)."""

_ADDRESS = re.compile(
    r"^(?:(?P<host>\[[0-9A-Fa-f:.]+\]|[0-9.]*|[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):)?"
    r"(?P<port>[0-9]+)$",
    re.ASCII,
)
_IPV4 = re.compile(r"^[0-9.]*$")
ENDPOINT_TYPES = frozenset({"tcp", "tcp6", "ssl", "unix", "systemd"})
"""Twisted's endpoint types: ``tcp:8080`` is that endpoint, not a host named tcp."""
_EXPECTED = (
    "expected a port, :PORT, HOST:PORT (an IPv4 address or a host name), [IPv6]:PORT or a "
    "Twisted endpoint such as tcp:8080:interface=127.0.0.1"
)


class ListenError(ValueError):
    """The value names no endpoint; the message says what was expected."""


def endpoint(reactor: IKdraReactor, value: str) -> IStreamServerEndpoint:
    """The endpoint *value* describes.

    :raises ListenError: when it is neither an address nor a Twisted endpoint description.
    """
    where = _where(value)
    if where is None:
        try:
            described: IStreamServerEndpoint = serverFromString(reactor, value)
        except (ValueError, KeyError, TypeError) as error:
            if str(error).startswith("Unknown endpoint type"):
                raise ListenError(f"{value!r}: {_EXPECTED}") from None
            raise ListenError(f"{value!r}: {error}") from None
        return described
    family, address, port = where
    if family is None:
        return DualStackEndpoint(reactor, port)
    if family == socket.AF_INET6:
        return TCP6ServerEndpoint(reactor, port, BACKLOG, address)
    return TCP4ServerEndpoint(reactor, port, BACKLOG, address)


def check(value: str) -> None:
    """Whether *value* describes an endpoint (nothing is made that listens).

    :raises ListenError: as :func:`endpoint` does.
    """
    endpoint(cast(IKdraReactor, None), value)  # parsing keeps the reactor, never calls it


def overlap(one: str, other: str) -> bool:
    """Whether two values would bind the same port of the same address (so one cannot listen).

    Addresses are compared as bound (``:8080``, ``8080``, ``[::]:8080`` and ``0.0.0.0:8080``
    all take port 8080 of every IPv4 address); Twisted endpoint descriptions, as written.
    """
    first, second = _where(one), _where(other)
    if first is None or second is None:
        return one == other
    (_, a, port), (_, b, port_b) = first, second
    if port != port_b or port == 0:
        return False
    return a == b or _covers(a, b) or _covers(b, a)


def port_of(value: str) -> int | None:
    """The port an address form binds (None for a Twisted endpoint description)."""
    where = _where(value)
    return None if where is None else where[2]


def _covers(wildcard: str, address: str) -> bool:
    if wildcard in ("", "::"):  # every address; an IPv6 socket takes IPv4 too (V6ONLY off)
        return True
    return wildcard == "0.0.0.0" and ":" not in address


def _where(value: str) -> tuple[socket.AddressFamily | None, str, int] | None:
    """What an address form binds: (family, address, port); None for a Twisted description.

    Every address is ``''`` with no family.

    :raises ListenError: for a value that is neither.
    """
    match = _ADDRESS.match(value)
    if match is not None and (match["host"] or "").lower() in ENDPOINT_TYPES:
        match = None
    if match is None:
        if ":" not in value:
            raise ListenError(f"{value!r}: {_EXPECTED}")
        return None
    port = int(match["port"])
    if port > 65535:
        raise ListenError(f"{value!r}: the port must be at most 65535")
    host = match["host"] or ""
    if not host:
        return None, "", port
    if host.startswith("["):
        return socket.AF_INET6, host[1:-1], port
    if _IPV4.match(host):
        return socket.AF_INET, host, port
    family, address = resolve(value, host)
    return family, address, port


def resolve(value: str, host: str) -> tuple[socket.AddressFamily, str]:
    """The address a host name is bound at: its first IPv4 address, else its first IPv6 one.

    :raises ListenError: when the name does not resolve to an address this host can bind.
    """
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ListenError(
            f"{value!r}: the host name {host!r} does not resolve ({reason})"
        ) from None
    for wanted in (socket.AF_INET, socket.AF_INET6):
        for family, _, _, _, sockaddr in found:
            if family == wanted:
                return family, str(sockaddr[0])
    raise ListenError(f"{value!r}: the host name {host!r} has no IPv4 or IPv6 address")


@implementer(IStreamServerEndpoint)
@attrs.frozen
class DualStackEndpoint:
    """Every address, IPv4 and IPv6, on one port; IPv4 alone where the host has no IPv6."""

    reactor: IKdraReactor
    port: int

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        """Bind and listen; fail with CannotListenError as the TCP endpoints do."""
        try:
            sock = _dual_stack_socket(self.port)
        except OSError as error:
            if error.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT):
                return fail(CannotListenError("", self.port, error))
            log.warn(
                "IPv6 is not available here ({error}): listening on IPv4 only",
                error=error.strerror,
            )
            listening: Deferred[IListeningPort] = TCP4ServerEndpoint(
                self.reactor, self.port, BACKLOG
            ).listen(factory)
            return listening
        try:
            port = self.reactor.adoptStreamPort(
                sock.fileno(),
                socket.AF_INET6,
                factory,  # type: ignore[arg-type]
            )
        finally:
            sock.close()  # the reactor holds its own duplicate
        return succeed(port)


def _dual_stack_socket(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("::", port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
