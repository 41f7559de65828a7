"""A Klein fake of the Kubernetes API: the DRA lists and watches, paging, auth and faults.

It answers as kube-apiserver does (``limit``/``continue``, ``Status`` bodies, 410 Expired for a
stale continue token; watches with bookmarks, streaming lists, ERROR 410 for a compacted
version) and can be told to misbehave: fail a resource with any code, send HTML or garbage,
hang, serve short or empty pages, expire the next continue token, refuse streaming lists.
It also answers TokenReviews and SubjectAccessReviews from the users and grants it is given,
and records each review with when it arrived (to count reviews a second).
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable
from typing import Any, cast

import attrs
from klein import Klein
from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

from kdraexp.dra.listing import GROUP, LIST_ORDER

KINDS = {kind.plural: kind.kind for kind in LIST_ORDER if kind.group == GROUP}
"""What it serves: every kind of resource.k8s.io the exporter lists."""
PLURALS = tuple(KINDS)
CORE = {"pods": "Pod"}
"""Core kinds it serves once a test gives it their objects (``objects["pods"] = [...]``)."""


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A Kubernetes ``Status`` body."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@attrs.define
class Fault:
    """What to answer instead of the list: a code and a body (bytes or JSON), or hang."""

    code: int = 500
    body: Any = None
    content_type: str = "application/json"
    hang: bool = False
    times: int | None = None
    """How many requests it answers; None for all."""
    headers: dict[str, str] = attrs.Factory(dict)


@attrs.define
class Review:
    """A review the fake received: its kind's plural, its spec, and when (monotonic seconds)."""

    plural: str
    spec: dict[str, Any]
    at: float


@attrs.define
class Request:
    """A request the fake received."""

    method: str
    plural: str
    args: dict[str, list[str]]
    authorization: str | None
    accept_encoding: str | None = None
    cookie: str | None = None


class FakeKubeAPI:
    """The fake API server; its state is public so tests arrange and inspect it."""

    app = Klein()

    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {plural: [] for plural in PLURALS}
        self.requests: list[Request] = []
        self.tokens: set[str] | None = None
        """Bearer tokens accepted; None accepts any request."""
        self.faults: dict[str, Fault] = {}
        self.page_sizes: dict[str, list[int]] = {}
        """Per resource, sizes of the pages to serve in turn, ignoring ``limit``."""
        self.expire_continue: dict[str, int] = {}
        """Per resource, how many continue tokens to refuse with 410 Expired."""
        self.repeat_continue: dict[str, bool] = {}
        """Per resource, whether to answer with the continue token of the page asked for."""
        self.hanging: list[Deferred[bytes]] = []
        self.hold = False
        """Keep every answer until :meth:`release` (to make requests overlap in memory)."""
        self.held: list[Callable[[], None]] = []
        self.on_request: Callable[[Request], None] | None = None
        self.version = 100
        """The resourceVersion of the last change."""
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []
        """(version, resource, event type, object) of every change, for watches to replay."""
        self.compacted = 0
        """Watches from a version below this one get an ERROR 410."""
        self.streaming = True
        """Whether watches may ask for the initial events (a streaming list)."""
        self.watches: list[_Watch] = []
        """The watches open now."""
        self.users: dict[str, dict[str, Any]] = {}
        """Token -> the user a TokenReview says it is (``username``, ``groups``, ...)."""
        self.token_audiences: dict[str, builtins.list[str]] = {}
        """Token -> the audiences it is meant for (default: those asked for)."""
        self.grants: set[tuple[str, str, str]] = set()
        """(username, verb, path) a SubjectAccessReview allows."""
        self.reviews: builtins.list[Review] = []

    def add(self, plural: str, obj: dict[str, Any]) -> None:
        """Store an object (apiVersion and kind are filled in)."""
        self.objects[plural].append(
            {"apiVersion": "resource.k8s.io/v1", "kind": KINDS[plural], **obj}
        )

    def lists(self, plural: str | None = None) -> list[Request]:
        """The list requests received (not watches), of one resource or all."""
        return [
            r
            for r in self.requests
            if (plural is None or r.plural == plural) and "watch" not in r.args
        ]

    def change(self, plural: str, event: str, obj: dict[str, Any]) -> None:
        """ADDED, MODIFIED or DELETED: change the stored objects and tell the watches."""
        self.version += 1
        obj = {"apiVersion": "resource.k8s.io/v1", "kind": KINDS[plural], **obj}
        obj["metadata"] = {**obj.get("metadata", {}), "resourceVersion": str(self.version)}
        name = obj["metadata"].get("name")
        namespace = obj["metadata"].get("namespace")
        kept = [
            o
            for o in self.objects[plural]
            if (o["metadata"].get("name"), o["metadata"].get("namespace")) != (name, namespace)
        ]
        self.objects[plural] = kept if event == "DELETED" else [*kept, obj]
        self.history.append((self.version, plural, event, obj))
        for watch in list(self.watches):
            if watch.plural == plural:
                watch.send(event, obj)

    def bookmark(self, version: int | None = None) -> None:
        """Send every open watch a bookmark of *version* (the current one by default)."""
        for watch in list(self.watches):
            watch.send("BOOKMARK", _bookmark(watch.plural, version or self.version))

    def close_watches(self) -> None:
        """End every open watch, as the server does at a watch's timeoutSeconds."""
        for watch in list(self.watches):
            watch.close()

    def drop_watches(self) -> None:
        """Drop every open watch's connection mid-stream, as a server that crashed does."""
        for watch in list(self.watches):
            watch.drop()

    def compact(self) -> None:
        """Forget history up to now: watches from an older version get an ERROR 410."""
        self.compacted = self.version

    @app.route("/api/v1/<plural>", methods=["GET"])
    def core(self, request: IRequest, plural: str) -> bytes | Deferred[bytes]:
        """``GET`` a core list: 404 unless the test gave the fake its objects."""
        return self.list(request, plural)

    @app.route("/apis/resource.k8s.io/v1/<plural>", methods=["GET"])
    def list(self, request: IRequest, plural: str) -> bytes | Deferred[bytes]:
        """``GET`` one of the three lists."""
        if not self.hold:
            return self._list(request, plural)
        held: Deferred[bytes] = Deferred()
        self.held.append(lambda: held.callback(self._list(request, plural)))  # type: ignore[arg-type]
        return held

    @app.route("/apis/authentication.k8s.io/v1/tokenreviews", methods=["POST"])
    def token_review(self, request: IRequest) -> bytes | Deferred[bytes]:
        """``POST`` a TokenReview: authenticated when the token is one of :attr:`users`."""
        spec = self._review(request, "tokenreviews")
        if not isinstance(spec, dict):
            return spec
        user = self.users.get(spec.get("token", ""))
        asked = spec.get("audiences") or []
        meant = self.token_audiences.get(spec.get("token", ""), asked)
        reviewed: dict[str, Any] = {"authenticated": user is not None}
        if user is not None:
            reviewed.update(user=user, audiences=meant)
        return self._answer(request, 201, _reviewed("TokenReview", spec, reviewed))

    @app.route("/apis/authorization.k8s.io/v1/subjectaccessreviews", methods=["POST"])
    def access_review(self, request: IRequest) -> bytes | Deferred[bytes]:
        """``POST`` a SubjectAccessReview of a non-resource path: allowed as :attr:`grants` say."""
        spec = self._review(request, "subjectaccessreviews")
        if not isinstance(spec, dict):
            return spec
        asked = spec.get("nonResourceAttributes", {})
        allowed = (spec.get("user"), asked.get("verb"), asked.get("path")) in self.grants
        reviewed = {"allowed": allowed, "denied": False}
        return self._answer(request, 201, _reviewed("SubjectAccessReview", spec, reviewed))

    def _review(self, request: IRequest, plural: str) -> dict[str, Any] | bytes | Deferred[bytes]:
        """A review's spec, recorded; or the answer of its fault or of a refused credential."""
        spec: dict[str, Any] = json.loads(request.content.read()).get("spec", {})
        self.reviews.append(Review(plural, spec, time.monotonic()))
        header = request.getHeader("Authorization")
        if self.tokens is not None and (
            header is None or header.removeprefix("Bearer ") not in self.tokens
        ):
            return self._answer(request, 401, status(401, "Unauthorized", "Unauthorized"))
        fault = self.faults.get(plural)
        if fault is None:
            return spec
        if fault.hang:
            hung: Deferred[bytes] = Deferred()
            self.hanging.append(hung)
            return hung
        return self._answer(request, fault.code, fault.body)

    def release(self) -> None:
        """Answer the held requests, in the order they arrived."""
        self.hold = False
        held, self.held = self.held, []
        for answer in held:
            answer()

    def _list(self, request: IRequest, plural: str) -> bytes | Deferred[bytes]:
        args = {k.decode(): [v.decode() for v in vs] for k, vs in request.args.items()}
        if "watch" in args and plural in self.objects and plural not in self.faults:
            authorized = self.tokens is None or (
                (request.getHeader("Authorization") or "").removeprefix("Bearer ") in self.tokens
            )
            if authorized:
                self.requests.append(Request("GET", plural, args, None))
                return self._watch(request, plural, args)
        header = request.getHeader("Authorization")
        seen = Request(
            "GET",
            plural,
            args,
            header,
            request.getHeader("Accept-Encoding"),
            request.getHeader("Cookie"),
        )
        self.requests.append(seen)
        if self.on_request is not None:
            self.on_request(seen)
        if plural not in self.objects:
            return self._answer(
                request,
                404,
                status(404, "NotFound", "the server could not find the requested resource"),
            )
        if self.tokens is not None and (
            header is None or header.removeprefix("Bearer ") not in self.tokens
        ):
            return self._answer(request, 401, status(401, "Unauthorized", "Unauthorized"))
        fault = self.faults.get(plural)
        if fault is not None:
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    del self.faults[plural]
            if fault.hang:
                hung: Deferred[bytes] = Deferred()
                self.hanging.append(hung)
                return hung
            request.setHeader("Content-Type", fault.content_type)
            for name, value in fault.headers.items():
                request.setHeader(name, value)
            return self._answer(request, fault.code, fault.body)
        token = args.get("continue", [""])[0]
        start = 0
        if token:
            if self.expire_continue.get(plural, 0) > 0:
                self.expire_continue[plural] -= 1
                body = status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
                body["metadata"] = {"continue": "inconsistent"}
                return self._answer(request, 410, body)
            start = int(token.split(":")[1])
        items = self.objects[plural]
        planned = self.page_sizes.get(plural)
        if planned:
            size = planned.pop(0)
        elif "limit" in args:
            size = int(args["limit"][0])
        else:
            size = len(items) - start
        end = min(start + size, len(items))
        metadata: dict[str, Any] = {"resourceVersion": str(self.version)}
        if end < len(items) or planned:
            # A new token a page, as kube-apiserver's, also for an empty page: the fake may be
            # told to repeat one (repeat_continue) to play a server that never ends a list.
            metadata["continue"] = f"page:{end}" if not planned else f"page:{end}:{len(planned)}"
            if self.repeat_continue.get(plural):
                metadata["continue"] = f"page:{start}"
        return self._answer(
            request,
            200,
            {
                "kind": {**KINDS, **CORE}[plural] + "List",
                "apiVersion": "resource.k8s.io/v1",
                "metadata": metadata,
                "items": items[start:end],
            },
        )

    def _watch(
        self, request: IRequest, plural: str, args: dict[str, builtins.list[str]]
    ) -> bytes | Deferred[bytes]:
        initial = args.get("sendInitialEvents", ["false"])[0] == "true"
        if initial and not self.streaming:
            message = "sendInitialEvents is forbidden unless the WatchList feature gate is enabled"
            return self._answer(request, 422, status(422, "Invalid", message))
        request.setHeader("Content-Type", "application/json")
        watch = _Watch(self, request, plural)
        self.watches.append(watch)
        start = int(args.get("resourceVersion", ["0"])[0] or 0)
        if initial:
            for obj in self.objects[plural]:
                watch.send("ADDED", obj)
            end = _bookmark(plural, self.version)
            end["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
            watch.send("BOOKMARK", end)
        elif start and start < self.compacted:
            watch.send("ERROR", status(410, "Expired", f"too old resource version: {start}"))
            watch.close()
        else:
            for version, resource, event, obj in self.history:
                if resource == plural and version > start:
                    watch.send(event, obj)
        return watch.done

    @staticmethod
    def _answer(request: IRequest, code: int, body: Any) -> bytes:
        request.setResponseCode(code)
        if isinstance(body, bytes):
            return body
        if request.responseHeaders.getRawHeaders("Content-Type") is None:
            request.setHeader("Content-Type", "application/json")
        return json.dumps(body).encode()


def _reviewed(kind: str, spec: dict[str, Any], reviewed: dict[str, Any]) -> dict[str, Any]:
    """A review as the API server answers it: the spec sent back, with its status."""
    group = "authentication.k8s.io" if kind == "TokenReview" else "authorization.k8s.io"
    return {"apiVersion": f"{group}/v1", "kind": kind, "spec": spec, "status": reviewed}


def _bookmark(plural: str, version: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": KINDS[plural],
        "metadata": {"resourceVersion": str(version)},
    }


class _Watch:
    """One open watch: events written as lines until it is closed."""

    def __init__(self, api: FakeKubeAPI, request: IRequest, plural: str) -> None:
        self._api = api
        self._request = request
        self.plural = plural
        self.done: Deferred[bytes] = Deferred()
        cast(Any, request).notifyFinish().addBoth(lambda _: self._forget())
        request.write(b"")  # the headers now, as kube-apiserver sends them when a watch opens

    def send(self, event: str, obj: dict[str, Any]) -> None:
        if not self.done.called:
            self._request.write(json.dumps({"type": event, "object": obj}).encode() + b"\n")

    def close(self) -> None:
        self._forget()
        if not self.done.called:
            self.done.callback(b"")

    def drop(self) -> None:
        self._forget()
        self._request.loseConnection()  # type: ignore[attr-defined]

    def _forget(self) -> None:
        if self in self._api.watches:
            self._api.watches.remove(self)
