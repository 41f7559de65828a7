"""A fast fake of the three DRA lists and their watches: pages encoded ahead, counted.

Run as ``python -m benchmarks.fakeapi NODES PORT [PENDING [PODS [WITH_NODES [SHAPE [CLAIMS]]]]]``;
it prints ``ready`` when it serves (with PODS 1, the cluster's pods too, at ``/api/v1/pods``; with
WITH_NODES 1, its Nodes at ``/api/v1/nodes``; SHAPE names one of ``cluster.SHAPES``; with CLAIMS
0, no claim is allocated yet).
Lists honour ``limit``/``continue``.  Watches (``watch=1``) send the initial events when asked
(``sendInitialEvents``, ending with the ``k8s.io/initial-events-end`` bookmark), then every
change, a bookmark every ten seconds, an ERROR 410 to a watch from before the last compaction,
and end after ``timeoutSeconds`` (or close at once for ``/close``).

``GET /stats`` answers the requests received per resource (``watch:`` for watches);
``GET /delay?seconds=S`` makes every list answer S seconds late (0 restores), to hold a
collection open while a burst of scrapes arrives; ``GET /churn?rate=R`` releases or allocates
R claims a second (0 stops); ``GET /probe?name=N`` adds a claim named N now and answers the
time it was sent; ``GET /compact`` and ``GET /close`` act on the watches; ``GET /renew?nodes=N``
serves a cluster of N nodes whose every object is new, for lists (``cluster.renew``; with
``&shape=h100``, of that shape: ``cluster.SHAPES``).  ``GET /job?rate=R&churn=C`` starts
upstream's DRA scale job (:mod:`benchmarks.jobs`: a fill at R claims a second, then C short jobs
a second), ``GET /jobstate`` answers how far it got, and ``GET /step?name=N&step=S`` makes claim
N take step S of its life now and answers the time it was sent.

With ``FAKEAPI_CERT`` (a PEM file: the private key and the certificate chain) it speaks HTTPS, as
every API server does; with ``FAKEAPI_TOKEN``, a list or watch without that bearer token is
answered 401.  The paths above that steer it need no token.

It answers TokenReviews and SubjectAccessReviews (posted with ``FAKEAPI_TOKEN``), as an
exporter with ``--auth-filter`` sends them: :data:`SCRAPER_TOKEN` is :data:`SCRAPER`'s, who may
``get`` ``/metrics``; any other token is not authenticated, and nothing else is allowed.
``GET /reviews`` answers the reviews received per kind.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from benchmarks.cluster import cluster
from benchmarks.jobs import ScaleJob

PREFIX = "/apis/resource.k8s.io/v1/"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
DEFAULT_LIMIT = 500
SCRAPER_TOKEN = "bench-scraper-token"
"""The bearer token a Prometheus scrapes an exporter with ``--auth-filter`` with."""
SCRAPER = "system:serviceaccount:monitoring:prometheus"
"""Whose it is: allowed to get ``/metrics``, as kube-prometheus' Prometheus is."""
REVIEWS = {
    "/apis/authentication.k8s.io/v1/tokenreviews": "tokenreviews",
    "/apis/authorization.k8s.io/v1/subjectaccessreviews": "subjectaccessreviews",
}


def _listed(item: dict[str, Any]) -> tuple[str, str]:
    """Where a real API server lists an object: by namespace, then name (its storage key)."""
    metadata = item["metadata"]
    return metadata.get("namespace", ""), metadata["name"]


class Pages:
    """Every list's pages, encoded once per (resource, offset, limit); and the watches."""

    def __init__(
        self,
        nodes: int,
        pending: int = 0,
        with_pods: bool = False,
        with_nodes: bool = False,
        shape: str = "mixed",
        claims: bool = True,
    ) -> None:
        self.lock = threading.Lock()
        self.version = 10**6
        """The resourceVersion of the last change (the lists' items are older)."""
        self._load(
            cluster(nodes, pending, with_pods, with_nodes=with_nodes, shape=shape, claims=claims)
        )
        self.requests: Counter[str] = Counter()
        self.reviews: Counter[str] = Counter()
        """Reviews received by kind (their own count: ``requests`` counts lists and watches)."""
        self.delay = 0.0
        self.compacted = 0
        self.changed = threading.Condition(self.lock)
        self.events: list[tuple[int, str, bytes]] = []
        """(version, resource, event line) of every change."""
        self.closing = 0
        """Bumped to end every watch at once."""
        self.rate = 0.0
        """Claims changed a second by :meth:`churn`."""
        self.released: dict[int, dict[str, Any]] = {}
        """The status of each claim :meth:`churn` released, by its place."""
        self.renewed = 0
        """How many times the cluster was replaced whole (:meth:`renew`)."""
        self.job: ScaleJob | None = None
        """Upstream's scale job, once started."""

    def _load(self, lists: dict[str, list[dict[str, Any]]]) -> None:
        """Serve *lists* from now on, their pages encoded ahead."""
        objects = {plural: sorted(items, key=_listed) for plural, items in lists.items()}
        items = {
            plural: [json.dumps(item, separators=(",", ":")).encode() for item in listed]
            for plural, listed in objects.items()
        }
        encoded: dict[tuple[str, int, int], bytes] = {}
        with self.lock:
            self.objects, self.items, self.encoded = objects, items, encoded
        self.index = {
            plural: {
                (o["metadata"].get("namespace"), o["metadata"].get("name")): i
                for i, o in enumerate(items)
            }
            for plural, items in self.objects.items()
        }
        """Per resource, each object's place in the lists, by namespace and name."""
        for plural in self.items:
            for offset in range(0, max(1, len(self.items[plural])), DEFAULT_LIMIT):
                self.page(plural, offset, DEFAULT_LIMIT)

    def renew(self, nodes: int, shape: str = "mixed") -> None:
        """Serve a cluster of *nodes* nodes whose every object is new (see ``cluster.renew``)."""
        self.renewed += 1
        self._load(cluster(nodes, renewed=self.renewed, shape=shape))

    def page(self, plural: str, offset: int, limit: int) -> bytes:
        """The page of *plural* starting at *offset*, encoded on first use."""
        key = (plural, offset, limit)
        with self.lock:
            body = self.encoded.get(key)
        if body is None:
            items = self.items[plural]
            end = min(offset + limit, len(items))
            metadata = {"resourceVersion": str(self.version)}
            if end < len(items):
                metadata["continue"] = str(end)
            kind, api = {
                "resourceclaims": ("ResourceClaimList", "resource.k8s.io/v1"),
                "resourceslices": ("ResourceSliceList", "resource.k8s.io/v1"),
                "deviceclasses": ("DeviceClassList", "resource.k8s.io/v1"),
                "pods": ("PodList", "v1"),
                "nodes": ("NodeList", "v1"),
            }[plural]
            body = (
                b'{"kind":"'
                + kind.encode()
                + b'","apiVersion":"'
                + api.encode()
                + b'","metadata":'
                + json.dumps(metadata).encode()
                + b',"items":['
                + b",".join(items[offset:end])
                + b"]}"
            )
            with self.lock:
                self.encoded[key] = body
        return body

    def change(self, plural: str, event: str, obj: dict[str, Any]) -> float:
        """Change *obj* (the lists show it too) and wake the watches; return when it was made."""
        with self.lock:
            self.version += 1
            meta = dict(obj["metadata"])
            meta["resourceVersion"] = str(self.version)
            changed = {**obj, "metadata": meta}
            encoded = json.dumps(changed, separators=(",", ":")).encode()
            key = (meta.get("namespace"), meta.get("name"))
            index = self.index[plural].get(key)
            if event == "DELETED":
                if index is not None:
                    del self.items[plural][index], self.objects[plural][index]
                    self.index[plural] = {
                        (o["metadata"].get("namespace"), o["metadata"].get("name")): i
                        for i, o in enumerate(self.objects[plural])
                    }
            elif index is None:
                self.index[plural][key] = len(self.items[plural])
                self.items[plural].append(encoded)
                self.objects[plural].append(changed)
            else:
                self.items[plural][index] = encoded
                self.objects[plural][index] = changed
            self.encoded = {k: v for k, v in self.encoded.items() if k[0] != plural}
            line = b'{"type":"' + event.encode() + b'","object":' + encoded + b"}\n"
            self.events.append((self.version, plural, line))
            self.changed.notify_all()
            return time.time()

    def churn(self, rate: float) -> None:
        """Change *rate* claims a second, in turn, until the rate is changed.

        As pods come and go: a claim allocated and reserved is released (its status emptied,
        its device free again), a released one allocated and reserved again.
        """
        self.rate = rate
        claims = self.objects["resourceclaims"]
        released = self.released
        turn = 0
        while self.rate == rate and rate > 0:
            place = (turn * 7919) % len(claims)
            claim = claims[place]
            if place in released:
                status = released.pop(place)
            else:
                released[place], status = claim.get("status") or {}, {}
            self.change("resourceclaims", "MODIFIED", {**claim, "status": status})
            turn += 1
            time.sleep(1 / rate)


def bookmark(plural: str, version: int, end: bool = False) -> bytes:
    """A BOOKMARK event line (the last of a streaming list's initial events with *end*)."""
    meta: dict[str, object] = {"resourceVersion": str(version)}
    if end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "Bookmark", "metadata": meta}
    return json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n"


def serve(
    nodes: int,
    port: int,
    pending: int = 0,
    with_pods: bool = False,
    with_nodes: bool = False,
    shape: str = "mixed",
    host: str = "127.0.0.1",
    claims: bool = True,
) -> None:
    """Serve a cluster of *nodes* nodes until killed; *pending* and the others, as ``Pages``.

    On *host*: loopback, unless pods are to reach it (the node tier's).
    """
    pages = Pages(nodes, pending, with_pods, with_nodes, shape, claims)
    token = os.environ.get("FAKEAPI_TOKEN")
    bearer = f"Bearer {token}" if token else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes

        def setup(self) -> None:
            if isinstance(self.request, ssl.SSLSocket):
                self.request.do_handshake()  # in this connection's thread (see serve)
            super().setup()

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            if url.path == "/stats":
                with pages.lock:
                    self._send(200, json.dumps(pages.requests).encode())
                return
            if url.path == "/reviews":
                with pages.lock:
                    self._send(200, json.dumps(pages.reviews).encode())
                return
            if url.path == "/delay":
                pages.delay = float(query["seconds"][0])
                self._send(200, b"{}")
                return
            if url.path == "/churn":
                rate = float(query["rate"][0])
                pages.rate = 0.0
                if rate > 0:
                    threading.Thread(target=pages.churn, args=(rate,), daemon=True).start()
                self._send(200, b"{}")
                return
            if url.path == "/probe":
                claim = pages.objects["resourceclaims"][0]
                name = query["name"][0]
                meta = {**claim["metadata"], "name": name, "uid": f"probe-{name}"}
                sent = pages.change("resourceclaims", "ADDED", {**claim, "metadata": meta})
                self._send(200, json.dumps({"sent": sent}).encode())
                return
            if url.path == "/job":
                slices = pages.objects["resourceslices"]
                rate, churn = float(query["rate"][0]), float(query["churn"][0])
                pages.job = ScaleJob(pages.change, slices, rate, churn)
                threading.Thread(target=pages.job.run, daemon=True).start()
                self._send(200, b"{}")
                return
            if url.path == "/jobstate":
                job = pages.job
                assert job is not None, "no job started"
                state = {"fill": job.fill, "created": job.created, "filled": job.filled}
                state |= {"short": job.short, "waiting": job.waiting}
                self._send(200, json.dumps(state).encode())
                return
            if url.path == "/step":
                assert pages.job is not None, "no job started"
                sent = pages.job.step(query["name"][0], query["step"][0])
                self._send(200, json.dumps({"sent": sent}).encode())
                return
            if url.path == "/renew":
                pages.renew(int(query["nodes"][0]), query.get("shape", ["mixed"])[0])
                self._send(200, b"{}")
                return
            if url.path == "/compact":
                with pages.lock:
                    pages.compacted = pages.version
                self._send(200, b"{}")
                return
            if url.path == "/close":
                with pages.lock:
                    pages.closing += 1
                    pages.changed.notify_all()
                self._send(200, b"{}")
                return
            core = {PODS: "pods", NODES: "nodes"}
            plural = core.get(url.path) or url.path.removeprefix(PREFIX)
            if not url.path.startswith((PREFIX, PODS, NODES)) or plural not in pages.items:
                self._send(404, b'{"kind":"Status","code":404,"reason":"NotFound"}')
                return
            if bearer is not None and self.headers.get("Authorization") != bearer:
                self._send(401, b'{"kind":"Status","code":401,"reason":"Unauthorized"}')
                return
            if query.get("watch") == ["1"]:
                self._watch(plural, query)
                return
            limit = int(query.get("limit", [str(10**9)])[0])
            offset = int(query.get("continue", ["0"])[0])
            with pages.lock:
                pages.requests[plural] += 1
            if pages.delay:
                time.sleep(pages.delay)
            self._send(200, pages.page(plural, offset, limit))

        def do_POST(self) -> None:
            kind = REVIEWS.get(urlsplit(self.path).path)
            length = int(self.headers.get("Content-Length", "0"))
            review = json.loads(self.rfile.read(length)) if 0 < length <= 65536 else {}
            if kind is None:
                self._send(404, b'{"kind":"Status","code":404,"reason":"NotFound"}')
                return
            if bearer is not None and self.headers.get("Authorization") != bearer:
                self._send(401, b'{"kind":"Status","code":401,"reason":"Unauthorized"}')
                return
            with pages.lock:
                pages.reviews[kind] += 1
            spec = review.get("spec", {})
            if kind == "tokenreviews":
                known = spec.get("token") == SCRAPER_TOKEN
                user = {"username": SCRAPER, "groups": ["system:authenticated"]}
                status: dict[str, Any] = {"authenticated": known, "user": user if known else {}}
            else:
                asked = spec.get("nonResourceAttributes", {})
                allowed = (spec.get("user"), asked.get("verb"), asked.get("path"))
                status = {"allowed": allowed == (SCRAPER, "get", "/metrics")}
            self._send(201, json.dumps({**review, "status": status}).encode())

        def _watch(self, plural: str, query: dict[str, list[str]]) -> None:
            with pages.lock:
                pages.requests[f"watch:{plural}"] += 1
                closing = pages.closing
                start = int(query.get("resourceVersion", ["0"])[0] or 0)
                compacted = start and start < pages.compacted
                seen = len(pages.events)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            ends = time.monotonic() + float(query.get("timeoutSeconds", ["300"])[0])
            try:
                if compacted:
                    status = {"kind": "Status", "code": 410, "reason": "Expired"}
                    self.wfile.write(
                        json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
                    )
                    return
                if query.get("sendInitialEvents") == ["true"]:
                    for item in pages.items[plural]:
                        self.wfile.write(b'{"type":"ADDED","object":' + item + b"}\n")
                    self.wfile.write(bookmark(plural, pages.version, end=True))
                else:
                    seen = next(
                        (i for i, (v, _, _) in enumerate(pages.events) if v > start),
                        len(pages.events),
                    )
                last_bookmark = time.monotonic()
                while time.monotonic() < ends:
                    with pages.lock:
                        if len(pages.events) == seen and pages.closing == closing:
                            pages.changed.wait(timeout=1.0)
                        fresh = pages.events[seen:]
                        seen = len(pages.events)
                        version = pages.version
                        if pages.closing != closing:
                            return
                    for _, resource, line in fresh:
                        if resource == plural:
                            self.wfile.write(line)
                    if time.monotonic() - last_bookmark > 10:
                        self.wfile.write(bookmark(plural, version))
                        last_bookmark = time.monotonic()
                    self.wfile.flush()
            except OSError:
                return

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    certificate = os.environ.get("FAKEAPI_CERT")
    if certificate:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate)
        # The handshake in the connection's own thread, not in the accepting one.
        server.socket = context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]) if len(sys.argv) > 3 else 0,
        len(sys.argv) > 4 and sys.argv[4] == "1",
        len(sys.argv) > 5 and sys.argv[5] == "1",
        sys.argv[6] if len(sys.argv) > 6 else "mixed",
        claims=len(sys.argv) <= 7 or sys.argv[7] == "1",
    )
