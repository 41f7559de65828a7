"""TLS on the listeners, as ``--tls-config`` says, followed while its files change.

cert-manager renews a certificate a month before it expires and the kubelet swaps a Secret
volume's files (a new ``..data`` symlink) without restarting anything, so the file and what it
names are read again every :data:`CHECK_EVERY` seconds: what changed and loads is served to new
connections (open ones keep theirs); what does not load leaves the old pair serving, logged
once and counted (:mod:`kdraexp.telemetry.tlsstats`) until the files change again.  Client
certificates are checked in the handshake, so a client refused never sends a request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL, crypto
from OpenSSL._util import lib as _openssl  # pyOpenSSL has no call for the groups list
from twisted.application.service import Service
from twisted.internet.interfaces import (
    IOpenSSLServerConnectionCreator,
    IProtocolFactory,
    IReactorTime,
)
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOProtocol
from zope.interface import implementer

from kdraexp.serve import webconfig
from kdraexp.serve.handshakes import BoundedTLSFactory
from kdraexp.serve.webconfig import WebConfig, WebConfigError
from kdraexp.telemetry.tlsstats import TLSStats

log = Logger()

CHECK_EVERY = 10.0
"""Seconds between readings of the files: controller-runtime's certwatcher polls as often."""
_VERSIONS = {
    "TLS10": SSL.TLS1_VERSION,
    "TLS11": SSL.TLS1_1_VERSION,
    "TLS12": SSL.TLS1_2_VERSION,
    "TLS13": SSL.TLS1_3_VERSION,
}
_MODES = {
    "NoClientCert": SSL.VERIFY_NONE,
    "RequestClientCert": SSL.VERIFY_PEER,
    "RequireAnyClientCert": SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT,
    "VerifyClientCertIfGiven": SSL.VERIFY_PEER,
    "RequireAndVerifyClientCert": SSL.VERIFY_PEER | SSL.VERIFY_FAIL_IF_NO_PEER_CERT,
}


@implementer(IOpenSSLServerConnectionCreator)
class ServingTLS(Service):
    """The TLS of every listener: read at start, read again every :data:`CHECK_EVERY` s."""

    def __init__(self, path: str, clock: IReactorTime, stats: TLSStats) -> None:
        """Read *path* and what it names.

        :raises WebConfigError: when it cannot be served.
        """
        self._path = path
        self._stats = stats
        self.config = webconfig.load(path)
        self._context, stats.not_after = context(self.config)
        self._failed: str | None = None
        """The last reading's error, logged once; None when the files are what is served."""
        self._loop = LoopingCall(self.check)
        self._loop.clock = clock

    def headers(self) -> tuple[tuple[str, str], ...]:
        """The headers added to every answer (they follow the file too)."""
        return self.config.headers

    def serverConnectionForTLS(  # noqa: N802 - IOpenSSLServerConnectionCreator
        self, protocol: TLSMemoryBIOProtocol
    ) -> SSL.Connection:
        """A connection with the context served now."""
        return SSL.Connection(self._context, None)

    def wrap(self, factory: IProtocolFactory, reactor: IReactorTime) -> IProtocolFactory:
        """*factory*'s protocols spoken over TLS, handshakes bounded (:mod:`.handshakes`).

        *reactor* times the handshakes' deadlines and the writes' buffering.
        """
        return BoundedTLSFactory(self, factory, reactor)

    def startService(self) -> None:
        """Check the files from now on."""
        super().startService()
        self._loop.start(CHECK_EVERY, now=False)

    def stopService(self) -> None:
        """Stop checking."""
        super().stopService()
        if self._loop.running:
            self._loop.stop()

    def check(self) -> None:
        """Read the files again; serve what changed if it loads.

        Nothing it raises may end the loop: rotation would stop for the process's life.
        """
        try:
            self._check()
        except Exception:
            self._stats.reloaded("failure")
            log.failure("Reading --tls-config again failed; the previous one still serves")

    def _check(self) -> None:
        try:
            config = webconfig.load(self._path)
            if config == self.config:
                self._failed = None
                self._stats.last_successful = True
                return
            made, not_after = context(config)
        except WebConfigError as error:
            if str(error) != self._failed:
                self._failed = str(error)
                self._stats.reloaded("failure")
                log.error(
                    "--tls-config changed but cannot be served; the previous one still is: {error}",
                    error=str(error),
                )
            return
        self.config, self._context, self._failed = config, made, None
        self._stats.not_after = not_after
        self._stats.reloaded("success")
        log.info(
            "--tls-config {path} read again: new connections get what it names now", path=self._path
        )


def context(config: WebConfig) -> tuple[SSL.Context, float]:
    """The OpenSSL context *config* describes, and its certificate's notAfter.

    :raises WebConfigError: when the PEM does not load or the key is not the certificate's.
    """
    try:
        chain = x509.load_pem_x509_certificates(config.cert_pem)
    except ValueError:
        raise WebConfigError("the certificate is not PEM certificates") from None
    try:
        key = serialization.load_pem_private_key(config.key_pem, None)
    except (ValueError, TypeError):
        raise WebConfigError("the key is not an unencrypted PEM private key") from None
    made = SSL.Context(SSL.TLS_SERVER_METHOD)
    made.set_min_proto_version(_VERSIONS[config.min_version])
    if config.max_version is not None:
        made.set_max_proto_version(_VERSIONS[config.max_version])
    options = SSL.OP_NO_COMPRESSION | SSL.OP_NO_TICKET
    if config.prefer_server_cipher_suites:
        options |= SSL.OP_CIPHER_SERVER_PREFERENCE
    made.set_options(options)
    made.set_session_id(b"kdraexp")
    try:
        if config.cipher_suites:
            made.set_cipher_list(":".join(config.cipher_suites).encode())
        if config.curve_preferences:
            groups = ":".join(config.curve_preferences).encode()
            if _openssl.SSL_CTX_set1_curves_list(made._context, groups) != 1:
                raise SSL.Error("the curves are not available")
        made.use_certificate(chain[0])
        for certificate in chain[1:]:
            made.add_extra_chain_cert(certificate)
        made.use_privatekey(key)  # type: ignore[arg-type]
        if config.client_auth_type != "NoClientCert":
            _client_auth(made, config)
    except (SSL.Error, crypto.Error) as error:
        raise WebConfigError(f"TLS: {_openssl_reason(error)}") from None
    return made, chain[0].not_valid_after_utc.timestamp()


def _client_auth(made: SSL.Context, config: WebConfig) -> None:
    """Ask for client certificates; check them as ``client_auth_type`` says."""
    verifying = "Verify" in config.client_auth_type
    if config.client_ca_pem is not None:
        try:
            authorities = x509.load_pem_x509_certificates(config.client_ca_pem)
        except ValueError:
            raise WebConfigError("the client CA is not PEM certificates") from None
        store = made.get_cert_store()
        assert store is not None
        for authority in authorities:
            store.add_cert(crypto.X509.from_cryptography(authority))
            made.add_client_ca(authority)
    made.set_verify(
        _MODES[config.client_auth_type], _verifier(verifying, config.client_allowed_sans)
    )


def _verifier(verifying: bool, sans: tuple[str, ...]) -> Callable[..., bool]:
    """The handshake's check of each certificate the client sends (depth 0: its own)."""
    allowed = frozenset(sans)

    def verify(connection: Any, certificate: Any, error: int, depth: int, ok: int) -> bool:
        if verifying and not ok:
            return False
        if depth == 0 and allowed:
            return not allowed.isdisjoint(_sans(certificate.to_cryptography()))
        return True

    return verify


def _sans(certificate: x509.Certificate) -> set[str]:
    """Every subject alternative name, written as exporter-toolkit compares them."""
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    found: set[str] = set()
    for kind in (x509.DNSName, x509.RFC822Name, x509.UniformResourceIdentifier):
        found.update(names.get_values_for_type(kind))
    found.update(str(address) for address in names.get_values_for_type(x509.IPAddress))
    return found


def _openssl_reason(error: SSL.Error | crypto.Error) -> str:
    """OpenSSL's reasons, joined (its error is a list of (library, function, reason))."""
    reasons = [str(part[-1]) for part in (error.args[0] if error.args else []) if part]
    if not reasons:
        return str(error) or "OpenSSL refused it"
    return "; ".join(reasons)
