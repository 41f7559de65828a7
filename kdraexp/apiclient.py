"""Listing DRA objects from the API server: paged, authenticated, with readable errors.

Each list reads ``limit`` objects a page and follows ``continue`` until it is empty (a page may
be short or empty while ``continue`` is set).  Each page is reduced to samples as it arrives and
its JSON dropped, so memory follows the metrics, not the cluster's JSON.  A 410 Expired in the
middle of a list restarts it from the start once; a 401 re-reads the token and retries once.
"""

from __future__ import annotations

import platform

import attrs
import msgspec
from hyperlink import DecodedURL
from treq.client import HTTPClient
from twisted.internet.defer import CancelledError
from twisted.web.client import ResponseFailed, ResponseNeverReceived
from twisted.web.http import RESPONSES

from kdraexp import __version__
from kdraexp.credentials import CredentialError, Credentials
from kdraexp.dra import Kind, ListResult

USER_AGENT = f"kdraexp/{__version__} (python {platform.python_version()})"


@attrs.frozen
class ListError(Exception):
    """A list that failed: which resource, the reason (Kubernetes' or our own), the HTTP code."""

    resource: str
    reason: str
    """A Kubernetes Status reason (``Forbidden``, ``Expired``...) or ``Timeout``, ``Transport``,
    ``Decode``, ``Credentials``."""
    code: int | None = None
    message: str = ""
    public: bool = False
    """Whether *message* may be shown in the HTTP answer (it never may for API server text)."""

    def __str__(self) -> str:
        code = f"{self.code} " if self.code is not None else ""
        detail = f": {self.message}" if self.message else ""
        return f"list {self.resource}: {code}{self.reason}{detail}"

    def summary(self) -> str:
        """One line for the HTTP answer: no upstream text, which can hold RBAC details."""
        code = f"{self.code} " if self.code is not None else ""
        detail = f": {self.message}" if self.public and self.message else ""
        return f"list {self.resource} failed: {code}{self.reason}{detail}"


class _Status(msgspec.Struct):
    kind: str | None = None
    reason: str | None = None
    message: str | None = None
    code: int | None = None


_STATUS = msgspec.json.Decoder(_Status)


class KubeListClient:
    """Lists ``resource.k8s.io/v1`` resources through one treq ``HTTPClient``."""

    def __init__(
        self, http: HTTPClient, server: str, credentials: Credentials, page_size: int
    ) -> None:
        self._http = http
        self._base = DecodedURL.from_text(server.rstrip("/")).child("apis", "resource.k8s.io", "v1")
        self._credentials = credentials
        self._page_size = page_size

    async def fetch(self, kind: Kind) -> ListResult:
        """List every object of *kind*, cluster-wide, and reduce them to samples.

        :raises ListError: when the list cannot be completed.
        """
        try:
            return await self._list_pages(kind)
        except ListError as error:
            if error.reason != "Expired":
                raise
        return await self._list_pages(kind)

    async def _list_pages(self, kind: Kind) -> ListResult:
        result = ListResult()
        decoder = kind.decoder
        token: str | None = None
        while True:
            code, body = await self._get(kind, token)
            if code != 200:
                error = _status_error(kind.plural, code, body)
                if error.reason == "Expired" and token is None:
                    error = attrs.evolve(error, reason="Gone")  # only a continue token expires
                raise error
            try:
                page = decoder.decode(body)
            except msgspec.DecodeError as error:
                raise ListError(kind.plural, "Decode", code, _decode_message(body, error)) from None
            del body
            kind.reduce(page.items or [], result)
            token = page.metadata.continue_ if page.metadata is not None else None
            if not token:
                return result

    async def _get(self, kind: Kind, token: str | None) -> tuple[int, bytes]:
        url = self._base.child(kind.plural).add("limit", str(self._page_size))
        if token:
            url = url.add("continue", token)
        for attempt in (1, 2):
            headers: dict[bytes | str, list[bytes | str]] = {
                "Accept": ["application/json"],
                "User-Agent": [USER_AGENT],
            }
            try:
                authorization = await self._credentials.authorization()
            except CredentialError as error:
                raise ListError(kind.plural, "Credentials", None, str(error)) from None
            if authorization:
                headers["Authorization"] = [authorization]
            try:
                response = await self._http.get(url, headers=headers)
                body: bytes = await response.content()
            except CancelledError:
                raise
            except Exception as error:
                raise ListError(kind.plural, "Transport", None, transport_message(error)) from None
            if (
                response.code == 401
                and attempt == 1
                and self._credentials.after_unauthorized(authorization)
            ):
                continue
            return response.code, body
        raise AssertionError("unreachable")


def _status_error(resource: str, code: int, body: bytes) -> ListError:
    """Turn an error response into a ListError, from its Kubernetes Status when it has one."""
    try:
        status = _STATUS.decode(body)
    except msgspec.DecodeError:
        status = None
    if status is not None and status.kind == "Status" and status.reason:
        return ListError(resource, status.reason, code, _clip(status.message or ""))
    phrase = RESPONSES.get(code, b"").decode("ascii") or "HTTP error"
    return ListError(
        resource, phrase.replace(" ", ""), code, "the response is not a Kubernetes Status"
    )


def _decode_message(body: bytes, error: Exception) -> str:
    start = body[:64].lstrip().lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return "the response is an HTML page, not JSON"
    return f"the response is not a list of the expected shape: {_clip(str(error))}"


def transport_message(error: BaseException) -> str:
    """A short description of a connection failure, with the TLS or socket reason inside it."""
    if isinstance(error, (ResponseNeverReceived, ResponseFailed)) and error.reasons:
        return transport_message(error.reasons[0].value)
    return _clip(f"{type(error).__name__}: {error}")


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
