"""--tls-config: the exporter-toolkit web configuration, honoured or refused key by key."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
import yaml

from kdraexp.serve import tlscontext, webconfig
from kdraexp.serve.webconfig import WebConfigError


@pytest.fixture
def pair(tmp_path: Path) -> trustme.LeafCert:
    issued = trustme.CA().issue_cert("kdraexp.example")
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    issued.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    return issued


def write(tmp_path: Path, document: object) -> str:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def tls(**more: object) -> dict[str, object]:
    return {"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", **more}}


def test_defaults(tmp_path: Path, pair: trustme.LeafCert) -> None:
    """Paths relative to the file; NoClientCert and TLS 1.2 as exporter-toolkit's defaults."""
    config = webconfig.load(write(tmp_path, tls()))
    assert config.cert_pem == pair.cert_chain_pems[0].bytes()
    assert config.key_pem == pair.private_key_pem.bytes()
    assert (config.client_auth_type, config.min_version, config.max_version) == (
        "NoClientCert",
        "TLS12",
        None,
    )


def test_inline_pem_and_names_mapped(tmp_path: Path, pair: trustme.LeafCert) -> None:
    """Inline cert, key and client_ca are honoured; Go's suite and curve names become OpenSSL's."""
    config = webconfig.load(
        write(
            tmp_path,
            {
                "tls_server_config": {
                    "cert": pair.cert_chain_pems[0].bytes().decode(),
                    "key": pair.private_key_pem.bytes().decode(),
                    "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
                    "curve_preferences": ["CurveP256", "X25519"],
                    "max_version": "TLS13",
                    "client_ca": trustme.CA().cert_pem.bytes().decode(),
                    "client_auth_type": "RequireAndVerifyClientCert",
                },
                "http_server_config": {
                    "http2": False,
                    "headers": {"x-frame-options": "deny"},
                },
            },
        )
    )
    assert config.cert_pem == pair.cert_chain_pems[0].bytes()
    assert config.client_ca_pem is not None and config.client_ca_pem.startswith(b"-----BEGIN")
    assert config.cipher_suites == ("ECDHE-ECDSA-AES128-GCM-SHA256",)
    assert config.curve_preferences == ("P-256", "X25519")
    assert config.headers == (("X-Frame-Options", "deny"),)
    tlscontext.context(config)  # and OpenSSL takes them


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {**tls(), "basic_auth_users": {"alice": "$2y$10$x"}},
            "basic_auth_users is not supported by kdraexp (use client certificates or a "
            "NetworkPolicy)",
        ),
        ({**tls(), "rate_limit": {"interval": "1s"}}, "rate_limit is not supported by kdraexp"),
        ({**tls(), "tls_config": {}}, "unknown key 'tls_config'"),
        (tls(cert_pem="x"), "tls_server_config: unknown key 'cert_pem'"),
        (
            {**tls(), "http_server_config": {"http2": True}},
            "http_server_config.http2: kdraexp serves HTTP/1.1 only",
        ),
        (
            {**tls(), "http_server_config": {"headers": {"Server": "x"}}},
            "http_server_config.headers: 'Server' cannot be set (only Content-Security-Policy, "
            "X-Frame-Options, X-Content-Type-Options, X-XSS-Protection, "
            "Strict-Transport-Security)",
        ),
        (
            {"tls_server_config": {"key_file": "tls.key"}},
            "tls_server_config: cert_file (or cert) is required",
        ),
        ({}, "tls_server_config: cert_file (or cert) is required"),
        (
            tls(cert="inline"),
            "tls_server_config: give cert or cert_file, not both",
        ),
        (
            tls(client_auth_type="RequireClientCert"),
            "tls_server_config.client_auth_type 'RequireClientCert': expected one of "
            "NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven, "
            "RequireAndVerifyClientCert",
        ),
        (
            tls(client_auth_type="RequireAndVerifyClientCert"),
            "tls_server_config: client_auth_type RequireAndVerifyClientCert needs client_ca_file",
        ),
        (
            tls(client_ca_file="tls.crt"),
            "tls_server_config: a client CA is given but client_auth_type is NoClientCert "
            "(set RequireAndVerifyClientCert)",
        ),
        (
            tls(client_allowed_sans=["a"], client_auth_type="RequestClientCert"),
            "tls_server_config.client_allowed_sans needs client_auth_type "
            "RequireAndVerifyClientCert (or RequireAnyClientCert)",
        ),
        (
            tls(min_version="TLS13", max_version="TLS12"),
            "tls_server_config: max_version TLS12 is below min_version TLS13",
        ),
        (
            tls(min_version="VersionTLS12"),
            "tls_server_config.min_version 'VersionTLS12': expected one of TLS10, TLS11, TLS12, "
            "TLS13",
        ),
        (
            tls(cipher_suites=["TLS_AES_128_GCM_SHA256"]),
            "tls_server_config.cipher_suites: 'TLS_AES_128_GCM_SHA256' is not supported",
        ),
        (
            tls(curve_preferences=["P256"]),
            "tls_server_config.curve_preferences: 'P256' is not supported",
        ),
        (
            tls(key_file="missing.key"),
            "tls_server_config.key_file 'missing.key': No such file or directory",
        ),
        ("- a list", "the file: expected a mapping"),
    ],
)
def test_refused(tmp_path: Path, pair: trustme.LeafCert, document: object, message: str) -> None:
    """Every key the format has is honoured or refused in one line; unknown keys too."""
    path = write(tmp_path, document)
    with pytest.raises(WebConfigError) as refused:
        webconfig.load(path)
    assert str(refused.value).startswith(f"{path}: {message}")
    assert "\n" not in str(refused.value)


def test_mismatched_key_refused(tmp_path: Path, pair: trustme.LeafCert) -> None:
    """A key that is not the certificate's is refused when the context is made."""
    trustme.CA().issue_cert("x").private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    with pytest.raises(WebConfigError, match=r"^TLS: "):
        tlscontext.context(webconfig.load(write(tmp_path, tls())))


def test_not_yaml(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("tls_server_config: [\n")
    with pytest.raises(WebConfigError, match=r"web.yml: not valid YAML \(line 2\)$"):
        webconfig.load(str(path))
