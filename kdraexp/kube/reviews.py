"""TokenReviews and SubjectAccessReviews: who a bearer token is, and what they may read.

Posted with the exporter's own credentials over the API client's connections, as
controller-runtime's delegating authenticator and authorizer post them.  An answer is read
within :data:`BODY_LIMIT`; an answer that is not a review (an error Status, a 403 because the
exporter may not create reviews, a body that does not decode) raises :class:`ReviewError`, which
the caller turns into a refusal, never an admission.
"""

from __future__ import annotations

from collections.abc import Iterable
from http.cookiejar import DefaultCookiePolicy
from typing import Any

import attrs
import msgspec
from hyperlink import DecodedURL
from treq.client import HTTPClient
from treq.cookies import IndexableCookieJar
from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IConsumer
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IBodyProducer
from zope.interface import implementer

from kdraexp.kube.client import USER_AGENT, status_error, transport_message
from kdraexp.kube.credentials import CredentialError, Credentials
from kdraexp.kube.transport import cancelled, read_body

BODY_LIMIT = 256 * 1024
"""Bytes of a review's answer read: a user's groups and extra fit many times over."""
TOKEN_REVIEWS = ("apis", "authentication.k8s.io", "v1", "tokenreviews")
SUBJECT_ACCESS_REVIEWS = ("apis", "authorization.k8s.io", "v1", "subjectaccessreviews")


class ReviewError(Exception):
    """A review could not be had; the message says why."""


@attrs.frozen
class User:
    """Who a TokenReview says a token is: what a SubjectAccessReview asks about."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class _UserInfo(msgspec.Struct):
    username: str = ""
    uid: str = ""
    groups: list[str] = []
    extra: dict[str, list[str]] = {}


class _TokenReviewStatus(msgspec.Struct):
    authenticated: bool = False
    user: _UserInfo = msgspec.field(default_factory=_UserInfo)
    audiences: list[str] = []


class _TokenReview(msgspec.Struct):
    status: _TokenReviewStatus = msgspec.field(default_factory=_TokenReviewStatus)


class _AccessStatus(msgspec.Struct):
    allowed: bool = False


class _AccessReview(msgspec.Struct):
    status: _AccessStatus = msgspec.field(default_factory=_AccessStatus)


_TOKEN_REVIEW = msgspec.json.Decoder(_TokenReview)
_ACCESS_REVIEW = msgspec.json.Decoder(_AccessReview)


@implementer(IBodyProducer)
class _WholeBody:
    """A review's few hundred bytes, written at once.

    treq's default producer hands them to the global cooperator, a turn of the reactor later.
    """

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.length = len(data)

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:  # noqa: N802 - IBodyProducer
        """Write the whole body."""
        consumer.write(self._data)
        return succeed(None)

    def pauseProducing(self) -> None:
        """Nothing is left to pause."""

    def resumeProducing(self) -> None:
        """Nothing is left to resume."""

    def stopProducing(self) -> None:
        """Nothing is left to stop."""


class ReviewClient:
    """Posts reviews to the API server at *server* through *agent*, as *credentials* allow.

    *audiences* (``--auth-token-audiences``): when given, a TokenReview asks for them and a
    token authenticates only if the review says it is meant for one of them, as
    kube-rbac-proxy checks.
    """

    def __init__(
        self,
        agent: IAgent,
        server: str,
        credentials: Credentials,
        audiences: Iterable[str] = (),
        tls_server_name: str | None = None,
    ) -> None:
        self._http = HTTPClient(
            agent,
            cookiejar=IndexableCookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
            data_to_body_producer=_WholeBody,
        )
        self._base = DecodedURL.from_text(server.rstrip("/"))
        self._server_name = tls_server_name or self._base.host
        self._credentials = credentials
        self._audiences = tuple(audiences)

    async def authenticate(self, token: str) -> User | None:
        """Who *token* is, or None when the API server does not authenticate it.

        :raises ReviewError: when the review cannot be had.
        """
        spec: dict[str, Any] = {"token": token}
        if self._audiences:
            spec["audiences"] = list(self._audiences)
        body = await self._post(TOKEN_REVIEWS, "TokenReview", "authentication.k8s.io/v1", spec)
        try:
            status = _TOKEN_REVIEW.decode(body).status
        except (msgspec.DecodeError, RecursionError) as error:
            raise ReviewError(f"the TokenReview's answer does not decode: {error}") from None
        if not status.authenticated or not status.user.username:
            return None
        if self._audiences and not set(self._audiences) & set(status.audiences):
            return None
        info = status.user
        return User(
            info.username,
            info.uid,
            tuple(info.groups),
            tuple((key, tuple(values)) for key, values in sorted(info.extra.items())),
        )

    async def authorize(self, user: User, verb: str, path: str) -> bool:
        """Whether *user* may *verb* the non-resource *path*.

        :raises ReviewError: when the review cannot be had.
        """
        spec: dict[str, Any] = {
            "nonResourceAttributes": {"path": path, "verb": verb},
            "user": user.username,
            "groups": list(user.groups),
            "extra": {key: list(values) for key, values in user.extra},
        }
        if user.uid:
            spec["uid"] = user.uid
        body = await self._post(
            SUBJECT_ACCESS_REVIEWS, "SubjectAccessReview", "authorization.k8s.io/v1", spec
        )
        try:
            return _ACCESS_REVIEW.decode(body).status.allowed
        except (msgspec.DecodeError, RecursionError) as error:
            raise ReviewError(
                f"the SubjectAccessReview's answer does not decode: {error}"
            ) from None

    async def _post(
        self, path: tuple[str, ...], kind: str, version: str, spec: dict[str, Any]
    ) -> bytearray:
        """The answer to one review; a 401 re-reads the exporter's token and posts once more."""
        data = msgspec.json.encode({"apiVersion": version, "kind": kind, "spec": spec})
        url = self._base.child(*path)
        code, body, authorization = await self._send(url, data)
        if code == 401 and self._credentials.after_unauthorized(authorization):
            code, body, authorization = await self._send(url, data)
        if code not in (200, 201):
            error = status_error(path[-1], code, body)
            detail = f": {error.message}" if error.message else ""
            raise ReviewError(f"create {path[-1]} failed: {code} {error.reason}{detail}")
        return body

    async def _send(self, url: DecodedURL, data: bytes) -> tuple[int, bytearray, str | None]:
        headers = Headers(
            {
                b"Accept": [b"application/json"],
                b"Content-Type": [b"application/json"],
                b"User-Agent": [USER_AGENT],
            }
        )
        try:
            authorization = await self._credentials.authorization()
        except CredentialError as error:
            raise ReviewError(str(error)) from None
        if authorization:
            headers.setRawHeaders(b"Authorization", [authorization.encode("latin-1")])
        try:
            response = await self._http.post(
                url, data=data, headers=headers, allow_redirects=False, unbuffered=True
            )
            body = await read_body(response, BODY_LIMIT)
        except CancelledError:
            raise
        except Exception as error:
            if cancelled(Failure(error)):
                raise CancelledError() from None
            raise ReviewError(transport_message(error, self._server_name)) from None
        return response.code, body, authorization
