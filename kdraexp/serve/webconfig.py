"""``--tls-config``: the Prometheus exporter-toolkit web configuration file, read and checked.

The file node-exporter, kube-state-metrics and dcgm-exporter read, so an operator writes it
once for all of them.  Every key of the format is either honoured or refused with one line:
none is ignored, since a security setting silently dropped would serve what its author meant
to forbid.  Refused: ``basic_auth_users`` and ``rate_limit`` (not implemented here; client
certificates or a NetworkPolicy do their work) and ``http2: true`` (HTTP/1.1 only).  Paths
in it are relative to the file's own directory, as exporter-toolkit reads them.  The files it
names are read here too, so that two readings compare equal exactly when nothing that is
served changed (:mod:`kdraexp.serve.tlscontext` reads it again to follow rotations).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs
import yaml

from kdraexp.util.aliases import expands_past
from kdraexp.util.files import read_regular

CLIENT_AUTH_TYPES = (
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
)
"""Go's names (crypto/tls ClientAuthType), as the format spells them."""
VERSIONS = ("TLS10", "TLS11", "TLS12", "TLS13")
CIPHER_SUITES = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
"""Go's TLS 1.2 suite names and OpenSSL's for the same suites.  Go's TLS 1.3 suites cannot be
chosen (Go ignores them here too), and its RC4 and 3DES suites are not offered."""
CURVES = {"CurveP256": "P-256", "CurveP384": "P-384", "CurveP521": "P-521", "X25519": "X25519"}
"""Go's curve names and OpenSSL's group names."""
HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)
"""The answer headers the format lets an operator set."""
_REFUSED = {
    "basic_auth_users": "basic_auth_users is not supported by kdraexp (use client certificates "
    "or a NetworkPolicy)",
    "rate_limit": "rate_limit is not supported by kdraexp",
}
_TLS_KEYS = frozenset(
    {
        "cert_file",
        "key_file",
        "cert",
        "key",
        "client_ca_file",
        "client_ca",
        "client_auth_type",
        "client_allowed_sans",
        "min_version",
        "max_version",
        "cipher_suites",
        "prefer_server_cipher_suites",
        "curve_preferences",
    }
)
_EXPANSION = 10_000
"""Values the file may hold once its YAML aliases are followed."""


class WebConfigError(ValueError):
    """The web configuration cannot be served; the message says why, in one line."""


@attrs.frozen
class WebConfig:
    """What the file asks for, the PEM it names included (equal when nothing served changed)."""

    cert_pem: bytes = attrs.field(repr=False)
    key_pem: bytes = attrs.field(repr=False)
    client_ca_pem: bytes | None = attrs.field(default=None, repr=False)
    client_auth_type: str = "NoClientCert"
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str | None = None
    cipher_suites: tuple[str, ...] = ()
    """OpenSSL's names; empty for OpenSSL's defaults."""
    prefer_server_cipher_suites: bool = True
    curve_preferences: tuple[str, ...] = ()
    """OpenSSL's group names; empty for OpenSSL's defaults."""
    headers: tuple[tuple[str, str], ...] = ()
    """Added to every answer."""


def load(path: str) -> WebConfig:
    """Read the web configuration at *path* and the files it names.

    :raises WebConfigError: for anything the exporter cannot serve as written.
    """
    try:
        document = yaml.safe_load(read_regular(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise WebConfigError(f"{path}: {_reason(error)}") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise WebConfigError(f"{path}: not valid YAML{line}") from None
    if document is None:
        document = {}
    if expands_past(document, _EXPANSION):
        raise WebConfigError(f"{path}: more than {_EXPANSION} values once aliases are followed")
    try:
        return _read(_mapping(document, "the file"), os.path.dirname(path))
    except WebConfigError as error:
        raise WebConfigError(f"{path}: {error}") from None


def _read(document: Mapping[str, Any], directory: str) -> WebConfig:
    for key in document:
        if key in _REFUSED:
            raise WebConfigError(_REFUSED[key])
        if key not in ("tls_server_config", "http_server_config"):
            raise WebConfigError(f"unknown key {key!r}")
    headers = _http(_mapping(document.get("http_server_config") or {}, "http_server_config"))
    tls = _mapping(document.get("tls_server_config") or {}, "tls_server_config")
    for key in tls:
        if key not in _TLS_KEYS:
            raise WebConfigError(f"tls_server_config: unknown key {key!r}")
    cert_pem = _pem(tls, "cert", directory, required=True)
    key_pem = _pem(tls, "key", directory, required=True)
    assert cert_pem is not None and key_pem is not None
    client_ca = _pem(tls, "client_ca", directory, required=False)
    auth = _text(tls, "client_auth_type") or "NoClientCert"
    if auth not in CLIENT_AUTH_TYPES:
        raise WebConfigError(
            f"tls_server_config.client_auth_type {auth!r}: expected one of "
            + ", ".join(CLIENT_AUTH_TYPES)
        )
    if client_ca is not None and auth == "NoClientCert":
        raise WebConfigError(
            "tls_server_config: a client CA is given but client_auth_type is NoClientCert "
            "(set RequireAndVerifyClientCert)"
        )
    if client_ca is None and "Verify" in auth:
        raise WebConfigError(f"tls_server_config: client_auth_type {auth} needs client_ca_file")
    sans = _strings(tls, "client_allowed_sans")
    if sans and auth not in ("RequireAnyClientCert", "RequireAndVerifyClientCert"):
        raise WebConfigError(
            "tls_server_config.client_allowed_sans needs client_auth_type "
            "RequireAndVerifyClientCert (or RequireAnyClientCert)"
        )
    low = _version(tls, "min_version") or "TLS12"
    high = _version(tls, "max_version")
    if high is not None and VERSIONS.index(high) < VERSIONS.index(low):
        raise WebConfigError(f"tls_server_config: max_version {high} is below min_version {low}")
    prefer = tls.get("prefer_server_cipher_suites", True)
    if not isinstance(prefer, bool):
        raise WebConfigError("tls_server_config.prefer_server_cipher_suites: expected true/false")
    return WebConfig(
        cert_pem=cert_pem,
        key_pem=key_pem,
        client_ca_pem=client_ca,
        client_auth_type=auth,
        client_allowed_sans=sans,
        min_version=low,
        max_version=high,
        cipher_suites=_named(tls, "cipher_suites", CIPHER_SUITES),
        prefer_server_cipher_suites=prefer,
        curve_preferences=_named(tls, "curve_preferences", CURVES),
        headers=headers,
    )


def _http(config: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The answer headers; ``http2: true`` refused."""
    for key in config:
        if key not in ("http2", "headers"):
            raise WebConfigError(f"http_server_config: unknown key {key!r}")
    http2 = config.get("http2", False)
    if http2 is True:
        raise WebConfigError("http_server_config.http2: kdraexp serves HTTP/1.1 only")
    if http2 is not False:
        raise WebConfigError("http_server_config.http2: expected true/false")
    headers = _mapping(config.get("headers") or {}, "http_server_config.headers")
    chosen = []
    for name, value in headers.items():
        known = {header.lower(): header for header in HEADERS}.get(str(name).lower())
        if known is None:
            raise WebConfigError(
                f"http_server_config.headers: {name!r} cannot be set (only {', '.join(HEADERS)})"
            )
        if not isinstance(value, str) or not value.isprintable():
            raise WebConfigError(f"http_server_config.headers.{name}: expected one line of text")
        chosen.append((known, value))
    return tuple(chosen)


def _pem(tls: Mapping[str, Any], name: str, directory: str, *, required: bool) -> bytes | None:
    """``NAME`` (inline PEM) or ``NAME_file`` (a path), one of them at most."""
    inline, file = _text(tls, name), _text(tls, f"{name}_file")
    if inline and file:
        raise WebConfigError(f"tls_server_config: give {name} or {name}_file, not both")
    if inline:
        return inline.encode()
    if not file:
        if required:
            raise WebConfigError(f"tls_server_config: {name}_file (or {name}) is required")
        return None
    try:
        return read_regular(os.path.join(directory, file))
    except OSError as error:
        raise WebConfigError(f"tls_server_config.{name}_file {file!r}: {_reason(error)}") from None


def _named(tls: Mapping[str, Any], key: str, names: Mapping[str, str]) -> tuple[str, ...]:
    chosen = []
    for name in _strings(tls, key):
        if name not in names:
            raise WebConfigError(
                f"tls_server_config.{key}: {name!r} is not supported (one of "
                + ", ".join(names)
                + ")"
            )
        chosen.append(names[name])
    return tuple(dict.fromkeys(chosen))


def _version(tls: Mapping[str, Any], key: str) -> str | None:
    value = _text(tls, key)
    if value and value not in VERSIONS:
        raise WebConfigError(
            f"tls_server_config.{key} {value!r}: expected one of {', '.join(VERSIONS)}"
        )
    return value or None


def _text(tls: Mapping[str, Any], key: str) -> str:
    value = tls.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WebConfigError(f"tls_server_config.{key}: expected a string")
    return value


def _strings(tls: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = tls.get(key) or []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise WebConfigError(f"tls_server_config.{key}: expected a list of strings")
    return tuple(value)


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise WebConfigError(f"{what}: expected a mapping")
    return value


def _reason(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return getattr(error, "strerror", None) or str(error)
