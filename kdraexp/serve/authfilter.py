"""``--auth-filter``: the API server says who calls every route but the probes, and if they may.

A request carries a bearer token; a TokenReview says whose it is, then a SubjectAccessReview
whether that user may do the request's method (lower-case: ``get``) on the non-resource path
asked, as controller-runtime's filter and kube-rbac-proxy ask, so a Prometheus that may
``get`` ``/metrics`` there scrapes here too.  No token, or one the review does not
authenticate: 401.  Denied: 403 naming the user.  A review that fails: 500; one not answered
within :data:`REVIEW_TIMEOUT`, or a request that would send one past the bounds below: 503.
Nothing is served without an allowing review: the filter fails closed.

Bounded whatever clients send.  Results are cached for controller-runtime's times in at most
:data:`CACHE_ENTRIES` entries, the least recently used dropped first, keyed by a digest (the
token itself is never kept).  The requests of one token share its review while it is in flight.
At most :data:`MAX_IN_FLIGHT` reviews are in flight and :data:`REVIEWS_PER_SECOND` a second
are sent: a request that needs one past that is answered 503 at once, so a flood of new tokens
costs the API server a bounded load and the exporter a bounded memory, while a token already
cached keeps being served.  An ``Authorization`` header over :data:`MAX_AUTHORIZATION` bytes
is refused 401 without a review.  The probes (:data:`OPEN_PATHS`) stay open: the kubelet that
calls them has no token, and they say nothing about the cluster.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any, Generic, Protocol, TypeVar, cast
from urllib.parse import unquote

import attrs
from twisted.internet.defer import Deferred, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource, Resource
from twisted.web.server import NOT_DONE_YET, Request

from kdraexp.telemetry.authfilter import AuthFilterStats
from kdraexp.util.singleflight import KeyedFlights
from kdraexp.util.text import printable
from kdraexp.util.tokenbucket import TokenBucket

log = Logger()

OPEN_PATHS = frozenset({b"/healthz", b"/livez", b"/readyz"})
"""The probes: answered without a credential."""
AUTHENTICATED_TTL = 60.0
"""Seconds a TokenReview's answer is kept (controller-runtime's CacheTTL), either way."""
ALLOWED_TTL = 300.0
"""Seconds an allowing SubjectAccessReview is kept by default (controller-runtime's
AllowCacheTTL): a binding removed takes effect within it (``--auth-allowed-ttl``)."""
DENIED_TTL = 30.0
"""Seconds a denying one is kept (DenyCacheTTL): a new binding is honoured within it."""
REVIEW_TIMEOUT = 10.0
"""Seconds a review may take (controller-runtime's TokenAccessReviewTimeout)."""
CACHE_ENTRIES = 4096
"""Results kept: at :data:`REVIEWS_PER_SECOND`, a flood takes minutes to push out an entry a
Prometheus uses every scrape."""
MAX_IN_FLIGHT = 8
"""Reviews in flight at once, all tokens together."""
REVIEWS_PER_SECOND = 20.0
"""Reviews sent a second on average, with a burst of as many: at most 40 in any one second."""
MAX_AUTHORIZATION = 8192
"""Bytes of an ``Authorization`` header: a ServiceAccount token is about 1 KiB, an OIDC one with
its groups a few."""

S = TypeVar("S", bound="Named")


class Named(Protocol):
    """Someone a TokenReview authenticated."""

    @property
    def username(self) -> str:
        """The user's name, which a 403 says."""
        ...


class Reviews(Protocol[S]):
    """What the filter asks the API server (:mod:`kdraexp.kube.reviews` answers it)."""

    def authenticate(self, token: str) -> Coroutine[Any, Any, S | None]:
        """Who *token* is; None when it is not authenticated."""
        ...

    def authorize(self, user: S, verb: str, path: str) -> Coroutine[Any, Any, bool]:
        """Whether *user* may *verb* the non-resource *path*."""
        ...


@attrs.frozen
class Verdict:
    """What the filter made of a request: its outcome (the telemetry's label), code and line."""

    outcome: str
    code: int = 200
    message: str = ""


ALLOWED = Verdict("allowed")


class _Overloaded(Exception):
    """A review is needed, and one more would pass a bound."""


class _Cache:
    """Results by key, each until it expires, at most *size*, the least recently used out first."""

    def __init__(self, size: int, clock: IReactorTime) -> None:
        self._size = size
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[float, object]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> tuple[bool, object]:
        """(whether *key* holds a live result, the result)."""
        entry = self._entries.get(key)
        if entry is None:
            return False, None
        if entry[0] <= self._clock.seconds():
            del self._entries[key]
            return False, None
        self._entries.move_to_end(key)
        return True, entry[1]

    def put(self, key: bytes, value: object, ttl: float) -> None:
        """Keep *value* for *ttl* seconds, dropping the least recently used past the size."""
        self._entries[key] = (self._clock.seconds() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._size:
            self._entries.popitem(last=False)


class AuthFilter(Generic[S]):
    """Judges requests by asking *reviews*; :meth:`protect` puts a listener's routes behind it."""

    def __init__(
        self,
        reviews: Reviews[S],
        clock: IReactorTime,
        stats: AuthFilterStats,
        *,
        cache_entries: int = CACHE_ENTRIES,
        max_in_flight: int = MAX_IN_FLIGHT,
        reviews_per_second: float = REVIEWS_PER_SECOND,
        allowed_ttl: float = ALLOWED_TTL,
    ) -> None:
        self._reviews = reviews
        self._clock = clock
        self._stats = stats
        self._cache = _Cache(cache_entries, clock)
        stats.entries = self._cache.__len__
        self._flights = KeyedFlights[bytes, object](abandon=False)
        """Reviews in flight by key; each runs on for the cache when its requests go away."""
        self._allowed_ttl = allowed_ttl
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._bucket = TokenBucket(reviews_per_second, int(reviews_per_second), clock)

    def protect(self, resource: IResource, listener: str) -> IResource:
        """*resource* (a listener's routes) behind the filter, the probes left open."""
        return Protected(resource, self, self._stats, listener)

    async def judge(self, request: IRequest) -> Verdict:
        """Whether *request* may be served, and if not, the answer it gets."""
        token = _bearer(request)
        if token is None:
            return Verdict("unauthenticated", 401, "Unauthorized: a bearer token is required")
        digest = hashlib.sha256(token).digest()
        try:
            user = await self._review(
                b"n" + digest, "tokenreview", lambda: self._authenticate(token.decode("ascii"))
            )
            if user is None:
                return Verdict("unauthenticated", 401, "Unauthorized: the token is not valid")
            verb = request.method.decode("ascii", "replace").lower()
            path = unquote(request.path.decode("ascii", "replace"))
            asked = hashlib.sha256(b"\0".join((token, verb.encode(), path.encode()))).digest()
            allowed = await self._review(
                b"z" + asked, "subjectaccessreview", lambda: self._authorize(user, verb, path)
            )
        except _Overloaded:
            return Verdict("overloaded", 503, "Too many reviews in flight: try again")
        except TimeoutError:
            return Verdict("error", 503, "The API server did not answer the review in time")
        except Exception as error:  # a review that failed: never an admission
            log.warn("Auth filter: {error}", error=printable(str(error), 300))
            return Verdict("error", 500, "The review of the request's credentials failed")
        if not allowed:
            name = printable(user.username, 256)
            return Verdict("forbidden", 403, f"Authorization denied for user {name}")
        return ALLOWED

    async def _authenticate(self, token: str) -> tuple[object, float]:
        user = await self._reviews.authenticate(token)
        return user, AUTHENTICATED_TTL

    async def _authorize(self, user: S, verb: str, path: str) -> tuple[object, float]:
        allowed = await self._reviews.authorize(user, verb, path)
        return allowed, self._allowed_ttl if allowed else DENIED_TTL

    async def _review(
        self, key: bytes, kind: str, start: Callable[[], Coroutine[Any, Any, tuple[object, float]]]
    ) -> Any:
        """The cached result of *key*, else that of its review in flight, else of a new one.

        :raises _Overloaded: when a new review would pass :data:`MAX_IN_FLIGHT` or the rate.
        """
        found, result = self._cache.get(key)
        if found:
            return result
        joins = key in self._flights
        if not joins and (self._in_flight >= self._max_in_flight or not self._bucket.take()):
            raise _Overloaded()
        return await self._flights(key, lambda: self._send(key, kind, start))

    def _send(
        self, key: bytes, kind: str, start: Callable[[], Coroutine[Any, Any, tuple[object, float]]]
    ) -> Deferred[object]:
        """Send one review, within :data:`REVIEW_TIMEOUT`; keep and count its result."""
        self._in_flight += 1
        sent: Deferred[Any] = Deferred.fromCoroutine(start())
        sent.addTimeout(REVIEW_TIMEOUT, self._clock)

        def answered(answer: tuple[object, float]) -> object:
            value, ttl = answer
            self._cache.put(key, value, ttl)
            self._stats.reviewed(kind, _result(kind, value))
            return value

        def failed(failure: Failure) -> Failure:
            self._stats.reviewed(kind, "timeout" if failure.check(TimeoutError) else "error")
            return failure

        def ended(result: object) -> object:
            self._in_flight -= 1
            return result

        sent.addCallbacks(answered, failed)
        sent.addBoth(ended)
        return sent


def _result(kind: str, value: object) -> str:
    if kind == "tokenreview":
        return "unauthenticated" if value is None else "authenticated"
    return "allowed" if value else "denied"


def _bearer(request: IRequest) -> bytes | None:
    """The request's bearer token, or None: absent, several, too long or not a bearer one."""
    values = request.requestHeaders.getRawHeaders(b"authorization") or []
    if len(values) != 1 or len(values[0]) > MAX_AUTHORIZATION:
        return None
    header: bytes = values[0]
    scheme, _, token = header.strip().partition(b" ")
    token = token.strip()
    if scheme.lower() != b"bearer" or not token or not token.isascii() or b" " in token:
        return None
    return token


class Protected(Resource):
    """A listener's routes, each request judged first; the probes are passed straight on."""

    isLeaf = True  # noqa: N815 - Resource

    def __init__(
        self, inner: IResource, judge: AuthFilter[Any], stats: AuthFilterStats, listener: str
    ) -> None:
        super().__init__()
        self._inner = inner
        self._filter = judge
        self._stats = stats
        self._listener = listener

    def render(self, request: IRequest) -> Any:
        """Serve a probe; judge anything else, then serve it or answer the refusal."""
        if request.path in OPEN_PATHS:
            return self._inner.render(request)
        gone: list[Failure] = []
        cast(Request, request).notifyFinish().addErrback(gone.append)
        judged = Deferred.fromCoroutine(self._filter.judge(request))
        judged.addCallbacks(
            self._answer, self._broken, (request, gone), errbackArgs=(request, gone)
        )
        return NOT_DONE_YET

    def _answer(self, verdict: Verdict, request: IRequest, gone: list[Failure]) -> None:
        self._stats.judged(self._listener, verdict.outcome)
        if gone:
            return
        if verdict is ALLOWED:
            body = self._inner.render(request)
            if body is not NOT_DONE_YET:
                request.write(body)
                request.finish()
            return
        request.setResponseCode(verdict.code)
        request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
        if verdict.code == 401:
            request.setHeader(b"WWW-Authenticate", b'Bearer realm="kdraexp"')
        request.write(verdict.message.encode("utf-8", "replace") + b"\n")
        request.finish()

    def _broken(self, failure: Failure, request: IRequest, gone: list[Failure]) -> None:
        """The filter itself failed: logged, and answered 500 (never served)."""
        log.failure("Auth filter failed", failure)
        self._answer(Verdict("error", 500, "The auth filter failed"), request, gone)
