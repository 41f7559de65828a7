"""Listing DRA objects from the API server: paged, authenticated, with readable errors.

Each list reads ``limit`` objects a page and follows ``continue`` until it is empty (a page may
be short or empty while ``continue`` is set).  Each page is handed on as it arrives and its JSON
dropped, so memory follows the metrics, not the cluster's JSON.  A 410 Expired in the middle of a
list (the list changed faster than it could be paged) starts it over as one unpaged list, which
is always consistent, as client-go's pager does; a 401 re-reads the token and retries once.  A
kind served under several versions (DeviceTaintRule) is listed at the newest the server serves.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Callable, Iterator
from http.cookiejar import DefaultCookiePolicy

import attrs
import msgspec
from hyperlink import DecodedURL
from treq.client import HTTPClient
from treq.cookies import IndexableCookieJar
from twisted.internet.defer import CancelledError
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import ResponseFailed, ResponseNeverReceived
from twisted.web.http import RESPONSES
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IResponse

from kdraexp import __version__
from kdraexp.dra import wire
from kdraexp.dra.listing import PAGE, Kind, ListError, Reader, Reason, ShapeError, StatusReason
from kdraexp.kube import tls
from kdraexp.kube.credentials import CredentialError, Credentials
from kdraexp.kube.inflate import NotInflated, ResponseTooLarge, decoding_agent
from kdraexp.kube.transport import Limits, cancelled, read_body, read_lines
from kdraexp.util.surrogates import Mended, marked, mend
from kdraexp.util.text import printable
from kdraexp.util.turns import feed

USER_AGENT = f"kdraexp/{__version__} (python {platform.python_version()})".encode()
STATUS_REASONS = frozenset(StatusReason)
"""The reasons a Kubernetes Status may give: any other is not trusted (see StatusReason)."""

WATCH_EVENTS = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")
"""The event types a watch sends besides ERROR: any other is a broken stream."""


class _ContinueExpired(Exception):
    """A continue token expired (410) in the middle of a list: the list starts over."""


class _Status(msgspec.Struct):
    kind: str | None = None
    reason: str | None = None
    message: str | None = None
    code: int | None = None


_STATUS = msgspec.json.Decoder(_Status)
_EVENT = msgspec.json.Decoder(wire.WatchEvent)


class KubeListClient:
    """Lists and watches ``resource.k8s.io`` resources with treq, over the bounded agent stack.

    treq is asked to follow no redirect (the client certificate must not be offered to another
    host), keeps no cookie (its jar's policy accepts none), and reads no body itself
    (``unbuffered``): bodies go to the bounded collectors of :mod:`kdraexp.kube.transport`.  Its
    gzip decoder never runs: the agent under it inflates within the bound
    (:mod:`kdraexp.kube.inflate`).
    """

    def __init__(
        self,
        agent: IAgent,
        server: str,
        credentials: Credentials,
        page_size: int,
        limits: Limits = Limits(),  # noqa: B008 - frozen
        tls_server_name: str | None = None,
        *,
        clock: IReactorTime,
    ) -> None:
        self._http = HTTPClient(
            decoding_agent(agent, limits.body),
            cookiejar=IndexableCookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        )
        self._clock = clock
        self._limits = limits
        self.limit = limits.body
        self._base = DecodedURL.from_text(server.rstrip("/"))
        self._server_name = tls_server_name or self._base.host
        """The name the server's certificate is checked against."""
        self._credentials = credentials
        self._page_size = page_size
        self._versions: dict[str, str] = {}
        """Per kind served under several versions, the one found served."""
        self.list_versions: dict[str, str] = {}
        """Per kind, the resourceVersion of its last completed list (where a watch starts)."""

    async def fetch(self, kind: Kind, reader: Reader) -> int:
        """Hand every object of *kind*, cluster-wide, to *reader* as pages arrive; return how many.

        :raises ListError: when the list cannot be completed.
        """
        versions = self._versions_of(kind)
        for version in versions:
            try:
                return await self._list(kind, version, reader)
            except ListError as error:
                if error.code != 404 or version == versions[-1]:
                    raise
        raise AssertionError("a kind has at least one version")

    def _versions_of(self, kind: Kind) -> list[str]:
        """The versions to try for *kind*: the one found served first."""
        versions = list(kind.versions)
        known = self._versions.get(kind.plural)
        if known in versions:
            versions.remove(known)
            versions.insert(0, known)
        return versions

    async def _list(self, kind: Kind, version: str, reader: Reader) -> int:
        try:
            objects = await self._list_pages(kind, version, reader, self._page_size)
        except _ContinueExpired:
            reader.restart()
            objects = await self._list_pages(kind, version, reader, None)
        self._versions[kind.plural] = version
        return objects

    async def _list_pages(self, kind: Kind, version: str, reader: Reader, limit: int | None) -> int:
        token: str | None = None
        seen: set[str] = set()
        objects = 0
        listed_at: str | None = None
        while True:
            code, body = await self._get(kind, version, limit, token)
            if code != 200:
                error = status_error(kind.plural, code, body)
                if error.reason == StatusReason.EXPIRED and token:
                    raise _ContinueExpired()
                raise error
            decoded, items = _page(kind, code, body)
            objects += len(items)
            try:
                await feed(reader, items, self._clock)
            except ShapeError as error:
                raise ListError(kind.plural, Reason.DECODE, code, _clip(str(error))) from None
            meta = decoded.metadata
            token = meta.continue_ if meta is not None else None
            listed_at = listed_at or (meta.resource_version if meta is not None else None)
            del body, items, decoded, meta  # not kept while the next page is fetched
            if token in seen:
                raise ListError(
                    kind.plural,
                    Reason.DECODE,
                    code,
                    f"the server sent the continue token {_clip(token or '')!r} twice: "
                    "the list would never end",
                )
            if token:
                seen.add(token)
            if not token:
                if listed_at:
                    self.list_versions[kind.plural] = listed_at
                return objects

    async def watch(
        self,
        kind: Kind,
        resource_version: str | None,
        handle: Callable[[str, msgspec.Raw | Mended], None],
        *,
        initial: bool,
        timeout_seconds: int,
    ) -> None:
        """Follow *kind*'s changes from *resource_version*, handing each event to *handle*.

        With *initial*, a streaming list: the server first sends every object as ``ADDED``,
        then a bookmark annotated ``k8s.io/initial-events-end``.  Ends when the server closes
        the watch (after about *timeout_seconds*); an exception from *handle* ends it too.

        :raises ListError: when the watch cannot be opened or breaks.
        """
        versions = self._versions_of(kind)
        for version in versions:
            url = self._base.child(*kind.path(version)).add("watch", "1")
            url = url.add("allowWatchBookmarks", "true")
            url = url.add("timeoutSeconds", str(timeout_seconds))
            if initial:
                url = url.add("sendInitialEvents", "true")
                url = url.add("resourceVersionMatch", "NotOlderThan")
                url = url.add("resourceVersion", resource_version or "")
            elif resource_version:
                url = url.add("resourceVersion", resource_version)
            try:
                await self._watch(kind, url, handle)
            except ListError as error:
                if error.code != 404 or version == versions[-1]:
                    raise attrs.evolve(error, verb="watch") from None
                continue
            self._versions[kind.plural] = version
            return

    async def _watch(
        self,
        kind: Kind,
        url: DecodedURL,
        handle: Callable[[str, msgspec.Raw | Mended], None],
    ) -> None:
        def line(data: bytes) -> None:
            lone = 0
            try:
                event = _EVENT.decode(data)
            except (msgspec.DecodeError, RecursionError) as error:
                mended, found = mend(data)
                try:
                    event = _EVENT.decode(mended)
                except (msgspec.DecodeError, RecursionError):
                    message = _decode_message(data, error)
                    raise ListError(kind.plural, Reason.DECODE, 200, message) from None
                lone = len(found)
            if event.type == "ERROR":
                raise _event_status(kind, event.object)
            if event.type not in WATCH_EVENTS:
                raise ListError(
                    kind.plural,
                    Reason.DECODE,
                    200,
                    f"a watch event of unknown type {printable(repr(event.type), 64)}",
                )
            handle(event.type, Mended(event.object, lone) if lone else event.object)

        response, authorization = await self._open(kind, url)
        with self._read_failures(kind):
            if response.code == 401 and self._credentials.after_unauthorized(authorization):
                await read_body(response, self._limits.body)  # drained, so the connection is reused
                response, authorization = await self._open(kind, url)
            if response.code != 200:
                body = await read_body(response, self._limits.body)
                raise status_error(kind.plural, response.code, body)
            await read_lines(response, self._limits.body, line)

    async def _get(
        self, kind: Kind, version: str, limit: int | None, token: str | None
    ) -> tuple[int, bytearray]:
        url = self._base.child(*kind.path(version))
        if limit is not None:
            url = url.add("limit", str(limit))
        if token:
            url = url.add("continue", token)
        code, body, authorization = await self._send(kind, url)
        if code == 401 and self._credentials.after_unauthorized(authorization):
            code, body, authorization = await self._send(kind, url)
        return code, body

    async def _send(self, kind: Kind, url: DecodedURL) -> tuple[int, bytearray, str | None]:
        """One GET: the code, the body (bounded) and the Authorization it carried."""
        response, authorization = await self._open(kind, url)
        with self._read_failures(kind):
            body = await read_body(response, self._limits.body)
        return response.code, body, authorization

    @contextlib.contextmanager
    def _read_failures(self, kind: Kind) -> Iterator[None]:
        """A response whose reading fails: too large, or the transport's failure, in words.

        A cancellation stays one, and a ListError (a Status, a decoding error) goes through.
        """
        try:
            yield
        except (CancelledError, ListError):
            raise
        except ResponseTooLarge as error:
            raise ListError(kind.plural, Reason.TOO_LARGE, None, str(error), public=True) from None
        except (ShapeError, NotInflated) as error:  # bytes that arrived and cannot be read
            raise ListError(kind.plural, Reason.DECODE, None, str(error)) from None
        except Exception as error:
            if cancelled(Failure(error)):
                raise CancelledError() from None
            message = transport_message(error, self._server_name)
            raise ListError(kind.plural, Reason.TRANSPORT, None, message) from None

    async def _open(self, kind: Kind, url: DecodedURL) -> tuple[IResponse, str | None]:
        """Send one authenticated GET; the response (its body not read) and its Authorization.

        gzip is asked for (by the decoding agent): the API server compresses large lists.
        """
        headers = Headers({b"Accept": [b"application/json"], b"User-Agent": [USER_AGENT]})
        try:
            authorization = await self._credentials.authorization()
        except CredentialError as error:
            raise ListError(kind.plural, Reason.CREDENTIALS, None, str(error)) from None
        if authorization:
            headers.setRawHeaders(b"Authorization", [authorization.encode("latin-1")])
        try:
            response: IResponse = await self._http.get(
                url, headers=headers, allow_redirects=False, unbuffered=True
            )
        except CancelledError:
            raise
        except Exception as error:
            if cancelled(Failure(error)):
                raise CancelledError() from None
            message = transport_message(error, self._server_name)
            raise ListError(kind.plural, Reason.TRANSPORT, None, message) from None
        return response, authorization


def status_error(resource: str, code: int, body: bytes | bytearray) -> ListError:
    """Turn an error response into a ListError, from its Kubernetes Status when it has one."""
    try:
        status = _STATUS.decode(body)
    except (msgspec.DecodeError, RecursionError):
        status = None
    if status is not None and status.kind == "Status" and status.reason in STATUS_REASONS:
        return ListError(resource, status.reason, code, _clip(status.message or ""))
    phrase = RESPONSES.get(code, b"").decode("ascii") or "HTTPError"
    return ListError(
        resource, phrase.replace(" ", ""), code, "the response is not a Kubernetes Status"
    )


def _page(kind: Kind, code: int, body: bytearray) -> tuple[wire.Page, list[msgspec.Raw | Mended]]:
    """A page and its objects; those holding lone surrogates read as Go reads them, marked.

    :raises ListError: ``Decode``, for a body that is not a page.
    """
    try:
        decoded = PAGE.decode(body)
    except (msgspec.DecodeError, RecursionError) as error:
        mended, found = mend(body)
        try:
            if not found:
                raise
            decoded = PAGE.decode(mended)
        except (msgspec.DecodeError, RecursionError):
            message = _decode_message(body, error)
            raise ListError(kind.plural, Reason.DECODE, code, message) from None
        return decoded, marked(mended, decoded.items or [], found)
    return decoded, list(decoded.items or [])


def _event_status(kind: Kind, raw: msgspec.Raw) -> ListError:
    """An ERROR event's Status as a ListError (410 for a compacted version)."""
    code = 500
    with contextlib.suppress(msgspec.DecodeError, AttributeError, TypeError, ValueError):
        code = int(msgspec.json.decode(raw).get("code", 500))
    return status_error(kind.plural, code, bytes(raw))


def _decode_message(body: bytes | bytearray, error: Exception) -> str:
    start = body[:64].lstrip().lower()
    if start.startswith((b"<!doctype html", b"<html")):
        return "the response is an HTML page, not JSON"
    return f"the response is not a list of the expected shape: {_clip(str(error))}"


def transport_message(error: BaseException, server_name: str) -> str:
    """A short description of a connection failure: TLS failures in words, else the socket's."""
    if isinstance(error, (ResponseNeverReceived, ResponseFailed)) and error.reasons:
        return transport_message(error.reasons[0].value, server_name)
    return _clip(tls.explain(error, server_name) or f"{type(error).__name__}: {error}")


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
