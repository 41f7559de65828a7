"""What each request presents to the API server: a bearer token, basic auth, a client certificate.

Token files (in-cluster and ``tokenFile``) are re-read at least once a minute and right after a
401, because bound ServiceAccount tokens rotate.  Exec credential plugins run as child processes
without blocking the reactor; their credential is kept until its ``expirationTimestamp`` and
fetched again after a 401.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorProcess, IReactorTime
from twisted.internet.ssl import PrivateCertificate
from twisted.logger import Logger

from kdraexp.kube.execplugin import PluginError, run_plugin
from kdraexp.kube.kubeconfig import ClusterConfig, ExecConfig
from kdraexp.kube.tls import TLSConfigError, client_certificate
from kdraexp.util.files import read_regular
from kdraexp.util.singleflight import SingleFlight

log = Logger()

TOKEN_FILE_PERIOD = 60.0
"""Seconds a token read from a file is used before the file is read again (client-go's value)."""
TOKEN_LIMIT = 64 * 1024
"""Bytes a token file may have (a bound ServiceAccount token is about a kilobyte)."""
EXEC_TIMEOUT = 60.0
"""Seconds an exec credential plugin may run."""


class CredentialError(Exception):
    """No credential could be had; the message says why."""


class Credentials:
    """The authentication of one cluster configuration."""

    def __init__(
        self,
        config: ClusterConfig,
        reactor: IReactorTime,
        environ: Mapping[str, str] | None = None,
        forget_connections: Callable[[], object] = lambda: None,
    ) -> None:
        self._config = config
        self._reactor = reactor
        self._environ = dict(os.environ if environ is None else environ)
        self._forget_connections = forget_connections
        self._file_token: str | None = None
        self._file_read_at: float | None = None
        self._exec_token: str | None = None
        self._exec_certificate: PrivateCertificate | None = None
        self._exec_expires: float | None = None
        self._exec_fetched = False
        self._run_exec = SingleFlight(lambda: Deferred.fromCoroutine(self._fetch_exec()))
        self._static_certificate = None
        if config.client_cert_pem is not None and config.client_key_pem is not None:
            self._static_certificate = client_certificate(
                config.client_cert_pem, config.client_key_pem
            )

    def client_certificate(self) -> PrivateCertificate | None:
        """The certificate to present on new connections, if any."""
        return self._static_certificate or self._exec_certificate

    async def authorization(self) -> str | None:
        """The ``Authorization`` header value for the next request."""
        config = self._config
        if config.token_file:
            try:
                token = self._read_token_file(force=False)
            except CredentialError:
                if not config.token:
                    raise
                token = None  # never read: the static token stands in, as client-go does
            if token:
                return f"Bearer {token}"
        if config.token:
            return f"Bearer {config.token}"
        if config.username is not None or config.password is not None:
            pair = f"{config.username or ''}:{config.password or ''}".encode()
            return "Basic " + base64.b64encode(pair).decode("ascii")
        if config.exec is not None:
            if not self._exec_fetched or self._exec_expired():
                await self._run_exec()
            return f"Bearer {self._exec_token}" if self._exec_token else None
        return None

    def after_unauthorized(self, refused: str | None) -> bool:
        """Forget the credential the server refused; return whether a retry may now succeed.

        *refused* is the ``Authorization`` value the refused request carried.  Lists run in
        parallel, so another list may already have replaced it: then the retry uses the new one.
        """
        config = self._config
        if config.token_file:
            try:
                token = self._read_token_file(force=True)
            except CredentialError:
                return False
            return token is not None and f"Bearer {token}" != refused
        if config.exec is not None and not config.token and config.username is None:
            current = f"Bearer {self._exec_token}" if self._exec_token else None
            if current == refused:
                self._exec_fetched = False
            return True
        return False

    def _read_token_file(self, force: bool) -> str | None:
        path = self._config.token_file
        assert path is not None
        now = self._reactor.seconds()
        fresh = self._file_read_at is not None and now - self._file_read_at < TOKEN_FILE_PERIOD
        if fresh and not force:
            return self._file_token
        try:
            token = read_regular(path, TOKEN_LIMIT).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            if self._file_token is None:
                raise CredentialError(f"cannot read token file {path}: {reason}") from None
            log.warn(
                "Cannot read token file {path}: {error}; keeping the last token read",
                path=path,
                error=reason,
            )
            return self._file_token
        self._file_read_at = now
        if token:
            self._file_token = token
        return self._file_token

    def _exec_expired(self) -> bool:
        return self._exec_expires is not None and self._reactor.seconds() >= self._exec_expires

    async def _fetch_exec(self) -> None:
        exec_config = self._config.exec
        assert exec_config is not None
        processes = cast(IReactorProcess, self._reactor)
        output = await run_exec_plugin(exec_config, self._config, processes, self._environ)
        token, certificate, expires = parse_exec_credential(output, exec_config)
        self._exec_token = token
        if certificate is not None:
            self._exec_certificate = certificate
            self._forget_connections()
        self._exec_expires = expires
        self._exec_fetched = True


def parse_exec_credential(
    output: bytes, exec_config: ExecConfig
) -> tuple[str | None, PrivateCertificate | None, float | None]:
    """Read an ExecCredential: the token, the client certificate and the expiry (epoch seconds).

    :raises CredentialError: when the output is not a usable ExecCredential.
    """
    command = exec_config.command
    try:
        credential = json.loads(output)
    except (ValueError, RecursionError):
        raise CredentialError(f"exec plugin {command}: output is not JSON") from None
    if not isinstance(credential, dict) or credential.get("kind") != "ExecCredential":
        raise CredentialError(f"exec plugin {command}: output is not an ExecCredential")
    if credential.get("apiVersion") != exec_config.api_version:
        raise CredentialError(
            f"exec plugin {command}: apiVersion {credential.get('apiVersion')!r} "
            f"does not match the configured {exec_config.api_version!r}"
        )
    status: Any = credential.get("status") or {}
    if not isinstance(status, dict):
        raise CredentialError(f"exec plugin {command}: status is not an object")
    token = status.get("token") or None
    certificate = None
    cert_data, key_data = status.get("clientCertificateData"), status.get("clientKeyData")
    fields = {"token": token, "clientCertificateData": cert_data, "clientKeyData": key_data}
    for name, value in fields.items():
        if value is not None and not isinstance(value, str):
            raise CredentialError(f"exec plugin {command}: {name} is not a string")
    if cert_data or key_data:
        if not (cert_data and key_data):
            raise CredentialError(
                f"exec plugin {command}: clientCertificateData and clientKeyData "
                "must be given together"
            )
        try:
            certificate = client_certificate(cert_data.encode(), key_data.encode())
        except TLSConfigError as error:
            raise CredentialError(f"exec plugin {command}: {error}") from None
    if token is None and certificate is None:
        raise CredentialError(
            f"exec plugin {command}: the credential holds no token or certificate"
        )
    expires = None
    stamp = status.get("expirationTimestamp")
    if stamp:
        try:
            expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise CredentialError(
                f"exec plugin {command}: expirationTimestamp {stamp!r} is not RFC 3339"
            ) from None
    return token, certificate, expires


async def run_exec_plugin(
    exec_config: ExecConfig,
    config: ClusterConfig,
    reactor: IReactorProcess,
    environ: Mapping[str, str],
) -> bytes:
    """Run an exec credential plugin and return its standard output.

    :raises CredentialError: when it cannot be started, fails, writes too much, or outlasts
        :data:`EXEC_TIMEOUT`.
    """
    env = dict(environ)
    env.update(exec_config.env)
    spec: dict[str, Any] = {"interactive": False}
    if exec_config.provide_cluster_info:
        cluster: dict[str, Any] = {"server": config.server}
        if config.tls_server_name:
            cluster["tls-server-name"] = config.tls_server_name
        if config.insecure:
            cluster["insecure-skip-tls-verify"] = True
        if config.ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(config.ca_pem).decode()
        spec["cluster"] = cluster
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": exec_config.api_version, "kind": "ExecCredential", "spec": spec}
    )
    executable = shutil.which(exec_config.command, path=env.get("PATH"))
    if executable is None:
        raise CredentialError(f"exec plugin {exec_config.command}: command not found")
    argv = [exec_config.command, *exec_config.args]
    try:
        return await run_plugin(executable, argv, env, reactor, EXEC_TIMEOUT)
    except PluginError as error:
        raise CredentialError(str(error)) from None
