"""--tls-config served on real sockets: rotation, client certificates, versions, headers."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import pytest_twisted
import trustme
import yaml
from cryptography import x509
from twisted.internet import reactor as _reactor
from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Factory
from twisted.internet.task import Clock
from twisted.internet.threads import deferToThread
from twisted.logger import ILogObserver, LogEvent, LogLevel, globalLogPublisher
from twisted.web.resource import Resource
from zope.interface import provider

from kdraexp.serve import listen, tlscontext
from kdraexp.serve.site import BoundedSite
from kdraexp.serve.tlscontext import CHECK_EVERY, ServingTLS
from kdraexp.telemetry.http import HTTPStats
from kdraexp.telemetry.tlsstats import TLSStats
from kdraexp.util.reactor import IKdraReactor
from tests.processes import wait_for
from tests.test_listen import needs_ipv6

pytestmark = pytest.mark.slow

reactor = cast(IKdraReactor, _reactor)
CA = trustme.CA()
"""The CA of the served certificates."""


class Ok(Resource):
    isLeaf = True  # noqa: N815

    def render_GET(self, request: object) -> bytes:  # noqa: N802
        return b"ok\n"


@attrs.define
class Secret:
    """A directory laid out as the kubelet lays out a Secret volume, updated as it does.

    Each version is a new ``..<n>`` directory; ``..data`` is swapped to it in one rename and
    each key is a symlink through ``..data``.
    """

    root: Path
    versions: int = 0
    files: dict[str, bytes] = attrs.Factory(dict)

    def put(self, files: dict[str, bytes]) -> None:
        """A new version: *files* changed, the others as they were."""
        self.files.update(files)
        self.versions += 1
        version = self.root / f"..2026_12_07_{self.versions}"
        version.mkdir()
        for name, content in self.files.items():
            (version / name).write_bytes(content)
        (self.root / "..data_tmp").symlink_to(version.name)
        os.replace(self.root / "..data_tmp", self.root / "..data")
        for name in files:
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(f"..data/{name}")


def pair(*names: str, ca: trustme.CA = CA) -> dict[str, bytes]:
    issued = ca.issue_cert(*names)
    return {
        "tls.crt": issued.cert_chain_pems[0].bytes(),
        "tls.key": issued.private_key_pem.bytes(),
    }


def config(**tls: object) -> bytes:
    return yaml.safe_dump(
        {"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", **tls}}
    ).encode()


@attrs.define
class Served:
    """A listener on 127.0.0.1 serving /healthz over the TLS its Secret directory names."""

    secret: Secret
    tls: ServingTLS
    stats: TLSStats
    requests: HTTPStats
    clock: Clock
    port: Any

    @property
    def number(self) -> int:
        return int(self.port.getHost().port)

    def answered(self) -> int:
        """Requests the site answered (a client refused at the handshake never makes one)."""
        return sum(count for count in self.requests._requests.values())


@pytest.fixture
def secret(tmp_path: Path) -> Secret:
    made = Secret(tmp_path)
    made.put({**pair("127.0.0.1", "::1"), "web.yml": config()})
    return made


async def serve(secret: Secret, where: str = "127.0.0.1:0") -> Served:
    stats, requests, clock = TLSStats(), HTTPStats(), Clock()
    tls = ServingTLS(str(secret.root / "web.yml"), clock, stats)
    tls.startService()
    root = Resource()
    root.putChild(b"healthz", Ok())
    site = BoundedSite(root, "main", requests, {b"/healthz": "healthz"}, reactor)
    site.headers = tls.headers
    port = await listen.endpoint(reactor, where).listen(tls.wrap(site, reactor))
    return Served(secret, tls, stats, requests, clock, port)


@pytest_twisted.async_yield_fixture
async def served(secret: Secret) -> AsyncIterator[Served]:
    running = await serve(secret)
    yield running
    running.tls.stopService()
    await running.port.stopListening()


@attrs.frozen
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    certificate: x509.Certificate
    cipher: str


def client(*, certificate: trustme.LeafCert | None = None, tls12: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context()
    CA.configure_trust(context)
    if certificate is not None:
        certificate.configure_cert(context)
    if tls12:
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    return context


def _get(port: int, context: ssl.SSLContext, host: str, path: str) -> Answer:
    connection = http.client.HTTPSConnection(host, port, context=context, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        sock = cast(ssl.SSLSocket, connection.sock)
        der = sock.getpeercert(binary_form=True)
        assert der is not None
        cipher = sock.cipher()
        assert cipher is not None
        return Answer(
            response.status,
            dict(response.getheaders()),
            body,
            x509.load_der_x509_certificate(der),
            cipher[0],
        )
    finally:
        connection.close()


async def get(
    port: int, context: ssl.SSLContext, host: str = "127.0.0.1", path: str = "/healthz"
) -> Answer:
    answer: Answer = await deferToThread(_get, port, context, host, path)
    return answer


async def refused(port: int, context: ssl.SSLContext) -> str:
    """The error a client refused in the handshake sees (fails if it was answered)."""
    try:
        await get(port, context)
    except (OSError, http.client.HTTPException) as error:  # ssl.SSLError is an OSError
        return type(error).__name__
    raise AssertionError("the client was answered")


def served_pem(answer: Answer) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return answer.certificate.public_bytes(Encoding.PEM)


@pytest_twisted.ensureDeferred
async def test_serves_over_tls(served: Served) -> None:
    """/healthz over HTTPS with the configured pair; the expiry is exported."""
    answer = await get(served.number, client())
    assert answer.status == 200
    assert served_pem(answer) == (served.secret.root / "tls.crt").read_bytes()
    assert served.stats.not_after == answer.certificate.not_valid_after_utc.timestamp()


@needs_ipv6
@pytest_twisted.ensureDeferred
async def test_dual_stack(secret: Secret) -> None:
    """``:PORT`` over TLS answers on 127.0.0.1 and on ::1."""
    running = await serve(secret, ":0")
    try:
        assert (await get(running.number, client())).status == 200
        assert (await get(running.number, client(), "::1")).status == 200
    finally:
        running.tls.stopService()
        await running.port.stopListening()


@pytest_twisted.ensureDeferred
async def test_symlink_swap_serves_the_new_pair(served: Served) -> None:
    """A new pair swapped in is served to new connections within one check, no restart."""
    old = (served.secret.root / "tls.crt").read_bytes()
    served.secret.put(pair("127.0.0.1"))
    new = (served.secret.root / "tls.crt").read_bytes()
    assert served_pem(await get(served.number, client())) == old  # not checked yet
    served.clock.advance(CHECK_EVERY)
    answer = await get(served.number, client())
    assert served_pem(answer) == new
    assert served.stats._reloads == {"success": 1, "failure": 0}
    assert served.stats.not_after == answer.certificate.not_valid_after_utc.timestamp()


@pytest_twisted.ensureDeferred
async def test_a_pair_that_does_not_load_leaves_the_old_one(served: Served) -> None:
    """A key not the certificate's: the old pair serves, logged once and counted once."""
    old = (served.secret.root / "tls.crt").read_bytes()
    served_pair = {name: served.secret.files[name] for name in ("tls.crt", "tls.key")}
    mismatched = {"tls.crt": pair("127.0.0.1")["tls.crt"], "tls.key": pair("x")["tls.key"]}
    events: list[LogEvent] = []

    @provider(ILogObserver)
    def observe(event: LogEvent) -> None:
        if event.get("log_namespace") == "kdraexp.serve.tlscontext":
            events.append(event)

    globalLogPublisher.addObserver(observe)
    try:
        served.secret.put(mismatched)
        for _ in range(3):
            served.clock.advance(CHECK_EVERY)
    finally:
        globalLogPublisher.removeObserver(observe)
    assert served_pem(await get(served.number, client())) == old
    assert [event["log_level"] for event in events] == [LogLevel.error]
    assert served.stats._reloads == {"success": 0, "failure": 1}
    assert not served.stats.last_successful
    served.secret.put(served_pair)  # put back: what is served, nothing to reload
    served.clock.advance(CHECK_EVERY)
    assert served.stats._reloads == {"success": 0, "failure": 1}
    assert served.stats.last_successful
    served.secret.put(pair("127.0.0.1"))
    served.clock.advance(CHECK_EVERY)
    assert served_pem(await get(served.number, client())) != old
    assert served.stats._reloads == {"success": 1, "failure": 1}
    assert served.stats.last_successful


@pytest_twisted.ensureDeferred
async def test_web_config_read_again(served: Served) -> None:
    """The web config file itself follows: its headers, and its client auth, change live."""
    assert "X-Frame-Options" not in (await get(served.number, client())).headers
    headers = b"http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    served.secret.put({"web.yml": config() + headers})
    served.clock.advance(CHECK_EVERY)
    assert (await get(served.number, client())).headers["X-Frame-Options"] == "deny"
    mtls(served.secret, trustme.CA(), client_auth_type="RequireAndVerifyClientCert")
    served.clock.advance(CHECK_EVERY)
    await refused(served.number, client())


def mtls(secret: Secret, scrapers: trustme.CA, **more: object) -> None:
    secret.put(
        {
            "ca.crt": scrapers.cert_pem.bytes(),
            "web.yml": config(client_ca_file="ca.crt", **more),
        }
    )


@pytest_twisted.ensureDeferred
async def test_require_and_verify(secret: Secret) -> None:
    """RequireAndVerifyClientCert: no certificate, or one of another CA, refused at handshake."""
    scrapers = trustme.CA()
    mtls(secret, scrapers, client_auth_type="RequireAndVerifyClientCert")
    running = await serve(secret)
    try:
        await refused(running.number, client())
        other = trustme.CA().issue_cert("prometheus")
        await refused(running.number, client(certificate=other))
        await refused(running.number, client(certificate=other, tls12=True))
        assert running.answered() == 0
        good = scrapers.issue_cert("prometheus")
        assert (await get(running.number, client(certificate=good))).status == 200
        assert running.answered() == 1
    finally:
        running.tls.stopService()
        await running.port.stopListening()


@pytest_twisted.ensureDeferred
async def test_allowed_sans(secret: Secret) -> None:
    """client_allowed_sans: a certificate of the right CA without an allowed SAN is refused."""
    scrapers = trustme.CA()
    mtls(
        secret,
        scrapers,
        client_auth_type="RequireAndVerifyClientCert",
        client_allowed_sans=["prometheus.monitoring.svc"],
    )
    running = await serve(secret)
    try:
        await refused(running.number, client(certificate=scrapers.issue_cert("other.svc")))
        assert running.answered() == 0
        allowed = scrapers.issue_cert("prometheus.monitoring.svc")
        assert (await get(running.number, client(certificate=allowed))).status == 200
    finally:
        running.tls.stopService()
        await running.port.stopListening()


@pytest.mark.parametrize(
    ("auth", "without", "other_ca"),
    [
        ("RequestClientCert", True, True),
        ("RequireAnyClientCert", False, True),
        ("VerifyClientCertIfGiven", True, False),
    ],
)
@pytest_twisted.ensureDeferred
async def test_other_client_auth_types(
    secret: Secret, auth: str, without: bool, other_ca: bool
) -> None:
    """The three other Go policies: whether no certificate, or another CA's, is let in."""
    scrapers = trustme.CA()
    mtls(secret, scrapers, client_auth_type=auth)
    running = await serve(secret)
    try:
        for allowed, context in (
            (without, client()),
            (other_ca, client(certificate=trustme.CA().issue_cert("x"))),
            (True, client(certificate=scrapers.issue_cert("x"))),
        ):
            if allowed:
                assert (await get(running.number, context)).status == 200
            else:
                await refused(running.number, context)
    finally:
        running.tls.stopService()
        await running.port.stopListening()


@pytest_twisted.ensureDeferred
async def test_versions_and_suites(secret: Secret) -> None:
    """min_version refuses older clients; cipher_suites is what TLS 1.2 negotiates."""
    secret.put({"web.yml": config(min_version="TLS13")})
    running = await serve(secret)
    try:
        await refused(running.number, client(tls12=True))
        assert (await get(running.number, client())).status == 200
        secret.put(
            {
                "web.yml": config(
                    max_version="TLS12",
                    cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
                )
            }
        )
        running.clock.advance(CHECK_EVERY)
        assert (await get(running.number, client())).cipher == "ECDHE-ECDSA-AES128-GCM-SHA256"
    finally:
        running.tls.stopService()
        await running.port.stopListening()


def test_a_connection_the_site_refuses_is_closed(secret: Secret) -> None:
    """A full listener's site refusing a connection (None) is not wrapped in TLS."""
    tls = ServingTLS(str(secret.root / "web.yml"), Clock(), TLSStats())

    class Full(Factory):
        def buildProtocol(self, addr: object) -> None:
            return None

    wrapped = tls.wrap(Full(), reactor)
    assert wrapped.buildProtocol(IPv4Address("TCP", "127.0.0.1", 1)) is None


def test_an_unexpected_error_does_not_stop_the_checks(
    secret: Secret, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a reading raises, it is counted and the next check still runs."""
    stats, clock = TLSStats(), Clock()
    tls = ServingTLS(str(secret.root / "web.yml"), clock, stats)
    tls.startService()
    try:
        secret.put(pair("127.0.0.1"))

        def broken(config: object) -> None:
            raise RuntimeError("unexpected")

        monkeypatch.setattr(tlscontext, "context", broken)
        clock.advance(CHECK_EVERY)
        assert stats._reloads == {"success": 0, "failure": 1}
        monkeypatch.undo()
        clock.advance(CHECK_EVERY)
        assert stats._reloads == {"success": 1, "failure": 1}
    finally:
        tls.stopService()


@pytest_twisted.ensureDeferred
async def test_silent_handshakes_do_not_hold_the_listener(secret: Secret) -> None:
    """Clients that connect and never finish a handshake are shed like idle ones."""
    stats, clock = TLSStats(), Clock()
    tls = ServingTLS(str(secret.root / "web.yml"), clock, stats)
    root = Resource()
    root.putChild(b"healthz", Ok())
    site = BoundedSite(root, "main", HTTPStats(), {b"/healthz": "healthz"}, reactor, 2)
    port: Any = await listen.endpoint(reactor, "127.0.0.1:0").listen(tls.wrap(site, reactor))
    site.listening(port)
    number = port.getHost().port
    silent = [socket.create_connection(("127.0.0.1", number)) for _ in range(2)]
    half = socket.create_connection(("127.0.0.1", number))
    half.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, never the rest
    try:
        assert (await get(number, client())).status == 200
    finally:
        for sock in [*silent, half]:
            sock.close()
        await wait_for(lambda: not site._open, limit=10)  # closed before the port stops
        await port.stopListening()


def _send(port: int, request: bytes) -> bytes:
    """What the server answers *request* over TLS before it closes (bounded by the timeout)."""
    with client().wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1"
    ) as tls:
        tls.sendall(request)
        answer = b""
        while chunk := tls.recv(4096):
            answer += chunk
        return answer


@pytest_twisted.ensureDeferred
async def test_a_header_line_too_long_is_answered_and_closed(served: Served) -> None:
    """Past Twisted's 16 KiB line: 431 and closed at once, not held silent until the deadline."""
    request = b"GET /healthz HTTP/1.1\r\nAuthorization: Bearer " + b"a" * 65536 + b"\r\n\r\n"
    answer: bytes = await deferToThread(_send, served.number, request)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer[:80]
    assert served.requests._requests == {("main", "other", "431"): 1}
