"""The fake API served over real TLS on 127.0.0.1, with certificates from trustme."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import attrs
import trustme
from twisted.internet import reactor, ssl
from twisted.internet.interfaces import IListeningPort
from twisted.web.server import Site

from tests.fakeapi import FakeKubeAPI


@attrs.define
class TLSAPI:
    """A running fake API: where it listens and the CA that signed its certificate."""

    fake: FakeKubeAPI
    port: IListeningPort
    ca: trustme.CA
    client_ca: trustme.CA | None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port.getHost().port}"  # type: ignore[attr-defined]

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem.bytes()


@contextmanager
def serve(
    names: tuple[str, ...] = ("127.0.0.1",), require_client_certificate: bool = False
) -> Iterator[TLSAPI]:
    """Serve a new fake over TLS with a certificate for *names* until the block ends."""
    ca = trustme.CA()
    certificate = ssl.PrivateCertificate.loadPEM(
        ca.issue_cert(*names).private_key_and_cert_chain_pem.bytes()
    )
    client_ca = None
    if require_client_certificate:
        client_ca = trustme.CA()
        options = certificate.options(ssl.Certificate.loadPEM(client_ca.cert_pem.bytes()))
    else:
        options = certificate.options()
    fake = FakeKubeAPI()
    port = reactor.listenSSL(0, Site(fake.app.resource()), options, interface="127.0.0.1")  # type: ignore[attr-defined]
    try:
        yield TLSAPI(fake, port, ca, client_ca)
    finally:
        port.stopListening()
