"""How the client trusts the API server and presents its certificate."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from OpenSSL import SSL, crypto
from service_identity import VerificationError
from twisted.internet import ssl
from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

if TYPE_CHECKING:  # Twisted exports the interface from a private module only
    from twisted.internet._sslverify import IOpenSSLTrustRoot

_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL
)


class TLSConfigError(ValueError):
    """Certificates or keys that cannot be loaded."""


def trust_root(ca_pem: bytes | None) -> IOpenSSLTrustRoot:
    """The CAs to verify the server with: every certificate of *ca_pem*, else the system's."""
    if ca_pem is None:
        system: IOpenSSLTrustRoot = ssl.platformTrust()
        return system
    blocks = _PEM_CERTIFICATE.findall(ca_pem)
    if not blocks:
        raise TLSConfigError("the certificate authority holds no PEM certificate")
    try:
        root: IOpenSSLTrustRoot = ssl.trustRootFromCertificates(
            [ssl.Certificate.loadPEM(block) for block in blocks]
        )
        return root
    except (SSL.Error, crypto.Error) as error:
        raise TLSConfigError(f"the certificate authority cannot be loaded: {error}") from None


def client_certificate(cert_pem: bytes, key_pem: bytes) -> ssl.PrivateCertificate:
    """Load a client certificate and its key."""
    try:
        certificate: ssl.PrivateCertificate = ssl.PrivateCertificate.loadPEM(
            cert_pem + b"\n" + key_pem
        )
        return certificate
    except (SSL.Error, crypto.Error, ValueError) as error:
        raise TLSConfigError(f"the client certificate or key cannot be loaded: {error}") from None


@implementer(IPolicyForHTTPS)
class KubeTLSPolicy:
    """TLS for connections to the API server, as the kubeconfig or in-cluster files say.

    The client certificate is asked for at each new connection, because an exec credential plugin
    may hand out a new one.
    """

    def __init__(
        self,
        trust: IOpenSSLTrustRoot,
        server_name: str | None,
        insecure: bool,
        certificate: Callable[[], ssl.PrivateCertificate | None],
    ) -> None:
        self._trust = trust
        self._server_name = server_name
        self._insecure = insecure
        self._certificate = certificate

    def creatorForNetloc(self, hostname: bytes, port: int) -> IOpenSSLClientConnectionCreator:
        """Connection settings for one API server address."""
        name = self._server_name or hostname.decode("ascii")
        certificate = self._certificate()
        if self._insecure:
            return _Unverified(name, certificate)
        return ssl.optionsForClientTLS(name, trustRoot=self._trust, clientCertificate=certificate)


@implementer(IOpenSSLClientConnectionCreator)
class _Unverified:
    """``insecure-skip-tls-verify``: encrypt, send SNI, verify nothing."""

    def __init__(self, server_name: str, certificate: ssl.PrivateCertificate | None) -> None:
        options = ssl.CertificateOptions(
            verify=False,
            privateKey=certificate.privateKey.original if certificate else None,
            certificate=certificate.original if certificate else None,
        )
        self._context = options.getContext()
        self._sni = None
        if not (isIPAddress(server_name) or isIPv6Address(server_name)):
            self._sni = server_name.encode("idna")

    def clientConnectionForTLS(self, tlsProtocol: object) -> SSL.Connection:
        """A client connection that skips verification."""
        connection = SSL.Connection(self._context, None)
        connection.set_app_data(tlsProtocol)
        if self._sni:
            connection.set_tlsext_host_name(self._sni)
        return connection


def explain(error: BaseException, server_name: str) -> str | None:
    """What a TLS failure means, in words, or None when *error* is not one.

    *server_name* is the name the certificate was checked against (``tls-server-name`` or the
    host of ``server``).
    """
    if isinstance(error, VerificationError):
        return (
            f"TLS: the API server's certificate is not valid for {server_name} (it names "
            "other hosts or addresses): use the server's name in server:, or set "
            "tls-server-name to a name the certificate holds"
        )
    if isinstance(error, SSL.Error):
        reasons = " ".join(str(part) for args in error.args for part in _flatten(args))
        if "certificate verify failed" in reasons:
            return (
                "TLS: the API server's certificate could not be verified (not signed by the "
                "configured certificate-authority, or expired); check certificate-authority "
                "or the in-cluster ca.crt"
            )
        return f"TLS: the handshake failed ({' '.join(reasons.split())})"
    return None


def _flatten(value: object) -> list[object]:
    if isinstance(value, (list, tuple)):
        return [item for part in value for item in _flatten(part)]
    return [value]
