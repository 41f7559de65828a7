"""--listen and --telemetry-listen values, bound for real on this host."""

from __future__ import annotations

import errno
import socket
from typing import Any, cast

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.error import CannotListenError
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import ILogObserver, LogLevel, globalLogPublisher

from kdraexp.serve import listen
from kdraexp.util.reactor import IKdraReactor


def connects(family: socket.AddressFamily, host: str, port: int) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as client:
        client.settimeout(5)
        try:
            client.connect((host, port))
        except OSError:
            return False
        return True


async def bound(value: str) -> Any:
    port = await listen.endpoint(cast(IKdraReactor, reactor), value).listen(
        Factory.forProtocol(Protocol)
    )
    return port


def ipv6_here() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


needs_ipv6 = pytest.mark.skipif(not ipv6_here(), reason="this host has no IPv6 loopback")


@needs_ipv6
@pytest.mark.parametrize("form", [":{}", "{}"])
@pytest_twisted.ensureDeferred
async def test_every_address_answers_both_families(form: str) -> None:
    """``:PORT`` and ``PORT``: one socket answering on 127.0.0.1 and on ::1."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    number = probe.getsockname()[1]
    probe.close()
    port = await bound(form.format(number))
    try:
        assert connects(socket.AF_INET, "127.0.0.1", number)
        assert connects(socket.AF_INET6, "::1", number)
    finally:
        await port.stopListening()


@needs_ipv6
@pytest.mark.parametrize(
    ("value", "host", "family", "other", "other_family"),
    [
        ("127.0.0.1:0", "127.0.0.1", socket.AF_INET, "::1", socket.AF_INET6),
        ("[::1]:0", "::1", socket.AF_INET6, "127.0.0.1", socket.AF_INET),
    ],
    ids=["ipv4", "ipv6"],
)
@pytest_twisted.ensureDeferred
async def test_one_address(
    value: str,
    host: str,
    family: socket.AddressFamily,
    other: str,
    other_family: socket.AddressFamily,
) -> None:
    """``127.0.0.1:PORT`` is IPv4 only, ``[::1]:PORT`` IPv6 only."""
    port = await bound(value)
    number = port.getHost().port
    try:
        assert connects(family, host, number)
        assert not connects(other_family, other, number)
    finally:
        await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_host_without_ipv6(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where IPv6 cannot be had, every IPv4 address, and a warning saying so."""

    def no_ipv6(port: int) -> socket.socket:
        raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")

    monkeypatch.setattr(listen, "_dual_stack_socket", no_ipv6)
    seen: list[dict[str, Any]] = []
    observer = cast(ILogObserver, seen.append)
    globalLogPublisher.addObserver(observer)
    try:
        port = await bound(":0")
    finally:
        globalLogPublisher.removeObserver(observer)
    try:
        assert port.getHost().host == "0.0.0.0"
        assert connects(socket.AF_INET, "127.0.0.1", port.getHost().port)
    finally:
        await port.stopListening()
    warnings = [e for e in seen if e.get("log_level") == LogLevel.warn]
    assert [e["log_format"] for e in warnings] == [
        "IPv6 is not available here ({error}): listening on IPv4 only"
    ]


@pytest_twisted.ensureDeferred
async def test_port_in_use() -> None:
    """A port taken fails as the TCP endpoints fail: CannotListenError."""
    with socket.socket(socket.AF_INET6 if ipv6_here() else socket.AF_INET) as taken:
        taken.bind(("::" if ipv6_here() else "0.0.0.0", 0))
        taken.listen(1)
        with pytest.raises(CannotListenError):
            await bound(f":{taken.getsockname()[1]}")


@pytest_twisted.ensureDeferred
async def test_host_name() -> None:
    """``localhost:PORT``: the name's first IPv4 address is bound (an address, as a name says)."""
    port = await bound("localhost:0")
    try:
        assert port.getHost().host == "127.0.0.1"
        assert connects(socket.AF_INET, "127.0.0.1", port.getHost().port)
    finally:
        await port.stopListening()


def test_endpoint_types_are_not_host_names() -> None:
    """``tcp:8080`` is Twisted's endpoint, not a host named tcp."""
    assert isinstance(listen.endpoint(cast(IKdraReactor, reactor), "tcp:8080"), TCP4ServerEndpoint)
    with pytest.raises(listen.ListenError, match="does not resolve"):
        listen.check("no-such-host.invalid:8080")


@pytest.mark.parametrize(
    ("one", "other", "clash"),
    [
        (":8080", "0.0.0.0:8080", True),
        ("8080", ":8080", True),
        ("[::]:8080", "127.0.0.1:8080", True),
        ("127.0.0.1:8080", "localhost:8080", True),
        ("tcp:8080", "tcp:8080", True),
        (":8080", ":8081", False),
        ("[::1]:8080", "0.0.0.0:8080", False),
        ("127.0.0.1:8080", "127.0.0.2:8080", False),
        (":0", ":0", False),
    ],
)
def test_overlap(one: str, other: str, clash: bool) -> None:
    """Two values that would bind one port of one address, however written."""
    assert listen.overlap(one, other) is clash
    assert listen.overlap(other, one) is clash
