"""Credentials: token files re-read as tokens rotate, exec credentials parsed and cached."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from kdraexp.kube.credentials import (
    TOKEN_LIMIT,
    CredentialError,
    Credentials,
    parse_exec_credential,
)
from kdraexp.kube.kubeconfig import ClusterConfig, ExecConfig
from tests.conftest import failure_of, result_of

EXEC = ExecConfig(command="creds", api_version="client.authentication.k8s.io/v1")


def authorization(credentials: Credentials) -> str | None:
    return result_of(Deferred.fromCoroutine(credentials.authorization()))


def test_token_file_reread_every_minute(tmp_path: Path, clock: Clock) -> None:
    """The file is read again once 60 s have passed, not before."""
    token = tmp_path / "token"
    token.write_text("one\n")
    credentials = Credentials(ClusterConfig("https://x", "t", token_file=str(token)), clock)
    assert authorization(credentials) == "Bearer one"
    token.write_text("two")
    clock.advance(59)
    assert authorization(credentials) == "Bearer one"
    clock.advance(1)
    assert authorization(credentials) == "Bearer two"


def test_token_file_unreadable_keeps_last(tmp_path: Path, clock: Clock) -> None:
    """A token file that vanishes keeps the last token; tokenFile wins over token."""
    token = tmp_path / "token"
    token.write_text("from-file")
    credentials = Credentials(
        ClusterConfig("https://x", "t", token="static", token_file=str(token)), clock
    )
    assert authorization(credentials) == "Bearer from-file"
    token.unlink()
    clock.advance(61)
    assert authorization(credentials) == "Bearer from-file"
    assert credentials.after_unauthorized("Bearer from-file") is False


def test_basic_auth(clock: Clock) -> None:
    """username/password become a Basic header."""
    credentials = Credentials(ClusterConfig("https://x", "t", username="u", password="p"), clock)
    assert authorization(credentials) == "Basic dTpw"


def credential(**status: object) -> bytes:
    return json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": status,
        }
    ).encode()


def test_exec_credential_parsed() -> None:
    """Token and expiry are read from an ExecCredential."""
    token, certificate, expires = parse_exec_credential(
        credential(token="abc", expirationTimestamp="2030-01-01T00:00:00Z"), EXEC
    )
    assert (token, certificate) == ("abc", None)
    assert expires == 1893456000.0


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not an ExecCredential"),
        (
            json.dumps(
                {
                    "apiVersion": "client.authentication.k8s.io/v1beta1",
                    "kind": "ExecCredential",
                    "status": {"token": "x"},
                }
            ).encode(),
            "does not match",
        ),
        (credential(), "no token or certificate"),
        (credential(token="x", expirationTimestamp="tomorrow"), "RFC 3339"),
        (credential(clientCertificateData="x"), "together"),
        (credential(clientCertificateData="x", clientKeyData="y"), "cannot be loaded"),
    ],
)
def test_exec_credential_refused(output: bytes, message: str) -> None:
    """Unusable plugin output is a CredentialError naming the plugin."""
    with pytest.raises(CredentialError, match=message) as caught:
        parse_exec_credential(output, EXEC)
    assert str(caught.value).startswith("exec plugin creds:")


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ({"token": 42}, "token is not a string"),
        ({"clientCertificateData": ["x"], "clientKeyData": "y"}, "clientCertificateData is not"),
    ],
)
def test_exec_credential_odd_types(status: dict[str, object], message: str) -> None:
    """Fields of the wrong type are refused in words, not with a traceback."""
    output = json.dumps(
        {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": status,
        }
    ).encode()
    with pytest.raises(CredentialError, match=message):
        parse_exec_credential(output, EXEC)
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(CredentialError, match="not JSON"):
        parse_exec_credential(deep, EXEC)


@pytest.mark.parametrize("kind", ["missing", "fifo", "device", "huge"])
def test_unusable_token_file_is_a_credential_error(tmp_path: Path, clock: Clock, kind: str) -> None:
    """A token file that cannot be read, is not a regular file or is too big: Credentials, at once.

    A FIFO would block the whole process on open; /dev/zero would fill memory.
    """
    path = tmp_path / "token"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        path.write_bytes(b"t" * (TOKEN_LIMIT + 1))
    elif kind == "device":
        path = Path("/dev/zero")
    credentials = Credentials(ClusterConfig("https://x", "t", token_file=str(path)), clock)
    failure = Deferred.fromCoroutine(credentials.authorization())
    error = failure_of(failure).value
    assert isinstance(error, CredentialError)
    assert str(error).startswith(f"cannot read token file {path}: ")
    with_static = Credentials(
        ClusterConfig("https://x", "t", token="static", token_file=str(path)), clock
    )
    assert authorization(with_static) == "Bearer static"
