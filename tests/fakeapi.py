"""A Klein fake of the Kubernetes API: the three DRA lists, paging, auth and faults on demand.

It answers as kube-apiserver does (``limit``/``continue``, ``Status`` bodies, 410 Expired for a
stale continue token) and can be told to misbehave: fail a resource with any code, send HTML or
garbage, hang, serve short or empty pages, or expire the next continue token.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
from klein import Klein
from twisted.internet.defer import Deferred
from twisted.web.iweb import IRequest

PLURALS = ("resourceclaims", "resourceslices", "deviceclasses")
KINDS = {
    "resourceclaims": "ResourceClaim",
    "resourceslices": "ResourceSlice",
    "deviceclasses": "DeviceClass",
}


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
class Request:
    """A request the fake received."""

    method: str
    plural: str
    args: dict[str, list[str]]
    authorization: str | None
    accept_encoding: str | None = None


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
        self.hanging: list[Deferred[bytes]] = []
        self.hold = False
        """Keep every answer until :meth:`release` (to make requests overlap in memory)."""
        self.held: list[Callable[[], None]] = []
        self.on_request: Callable[[Request], None] | None = None

    def add(self, plural: str, obj: dict[str, Any]) -> None:
        """Store an object (apiVersion and kind are filled in)."""
        self.objects[plural].append(
            {"apiVersion": "resource.k8s.io/v1", "kind": KINDS[plural], **obj}
        )

    def lists(self, plural: str | None = None) -> list[Request]:
        """The list requests received, of one resource or all."""
        return [r for r in self.requests if plural is None or r.plural == plural]

    @app.route("/apis/resource.k8s.io/v1/<plural>", methods=["GET"])
    def list(self, request: IRequest, plural: str) -> bytes | Deferred[bytes]:
        """``GET`` one of the three lists."""
        if not self.hold:
            return self._list(request, plural)
        held: Deferred[bytes] = Deferred()
        self.held.append(lambda: held.callback(self._list(request, plural)))  # type: ignore[arg-type]
        return held

    def release(self) -> None:
        """Answer the held requests, in the order they arrived."""
        self.hold = False
        held, self.held = self.held, []
        for answer in held:
            answer()

    def _list(self, request: IRequest, plural: str) -> bytes | Deferred[bytes]:
        args = {k.decode(): [v.decode() for v in vs] for k, vs in request.args.items()}
        header = request.getHeader("Authorization")
        seen = Request("GET", plural, args, header, request.getHeader("Accept-Encoding"))
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
        metadata: dict[str, Any] = {"resourceVersion": "12345"}
        if end < len(items) or planned:
            metadata["continue"] = f"page:{end}"
        return self._answer(
            request,
            200,
            {
                "kind": KINDS[plural] + "List",
                "apiVersion": "resource.k8s.io/v1",
                "metadata": metadata,
                "items": items[start:end],
            },
        )

    @staticmethod
    def _answer(request: IRequest, code: int, body: Any) -> bytes:
        request.setResponseCode(code)
        if isinstance(body, bytes):
            return body
        if request.responseHeaders.getRawHeaders("Content-Type") is None:
            request.setHeader("Content-Type", "application/json")
        return json.dumps(body).encode()
