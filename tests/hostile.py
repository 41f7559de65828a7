"""A raw socket API server that answers the exporter's lists with one misbehaviour at a time.

tests/fakeapi.py answers as kube-apiserver does; this one writes to the socket itself, to send
what no HTTP server would: a body that never ends, one larger than any limit, a gzip bomb,
endless headers, a 20 KB header line, lists that become far more than their bytes once read,
new claims at every list while the pods are refused.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Callable

from tests.objects import new_claim

EMPTY = b'{"kind":"List","metadata":{},"items":[]}'
"""What a list answers when the behaviour is ``ok``, or aimed at another list."""


def bomb() -> bytes:
    """A gzip body of about 1 MB inflating to 1 GB."""
    compressor = gzip.GzipFile(fileobj=(sink := _Sink()), mode="wb", compresslevel=9)
    chunk = b" " * 2**20
    for _ in range(1024):
        compressor.write(chunk)
    compressor.close()
    return sink.data


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)

    def flush(self) -> None:
        pass


BOMB = bomb()


def slices(count: int, devices: list[dict[str, object]]) -> bytes:
    """A list of *count* ResourceSlices, each of its own pool, each holding *devices*."""
    items = [
        {
            "metadata": {"name": f"s{n}", "uid": f"u{n}", "resourceVersion": "1"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": f"n{n}",
                "pool": {"name": f"p{n}", "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }
        for n in range(count)
    ]
    return json.dumps({"kind": "List", "metadata": {}, "items": items}).encode()


def claims(batch: str, count: int) -> bytes:
    """A list of *count* allocated claims, named after *batch*."""
    items = [
        new_claim(
            f"{batch}-{n}",
            [{"request": "gpu", "driver": "gpu.example.com", "pool": "p", "device": f"d{n}"}],
            reserved=True,
        )
        for n in range(count)
    ]
    return json.dumps({"kind": "List", "metadata": {}, "items": items}).encode()


def pods(count: int, annotations: int) -> bytes:
    """A list of *count* pods asking for nothing, each carrying *annotations* annotations."""
    items = [
        {
            "metadata": {
                "name": f"p{n}",
                "namespace": "ns",
                "uid": f"pu{n}",
                "resourceVersion": "1",
                "annotations": {f"note-{i:06d}": "v" * 20 for i in range(annotations)},
            },
            "spec": {"containers": [{"name": "c"}]},
        }
        for n in range(count)
    ]
    return json.dumps({"kind": "PodList", "metadata": {}, "items": items}).encode()


FAT_PODS = pods(18, 90_000)
"""58 MB: 18 pods of 3.2 MB, each within what one object may be (4 MiB by default)."""
HUGE_POD = pods(1, 1_700_000)
"""58 MB: one pod, far past what one object may be."""
BARE = slices(2000, [{"name": f"d{i}"} for i in range(128)])
"""5 MB: 2,000 slices of 128 devices with nothing but a name, 256,000 devices in one page."""
FAT = slices(
    1,
    [
        {"name": f"d{d}", "attributes": {f"a{i}": {"int": i} for i in range(6000)}}
        for d in range(128)
    ],
)
"""18 MB: one slice of 128 devices of 6,000 attributes each."""


class Hostile:
    """Answers each request by the current *behaviour*: the name of one of its methods."""

    def __init__(self) -> None:
        self.behaviour = "ok"
        self.lists = 0
        """Lists of new claims answered."""
        self._lock = threading.Lock()
        self.closed = threading.Event()
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection:
            try:
                request = connection.recv(65536)
                if not request:
                    return
                line = request.split(b"\r\n", 1)[0]
                if b"watch=1" in line:  # watch mode: no streaming list, watches that idle
                    self._watch(connection, b"sendInitialEvents=true" in line)
                    return
                answer: Callable[[socket.socket], None] = getattr(self, "_" + self.behaviour)
                if self.behaviour in ("bare", "fat") and b"/resourceslices" not in request:
                    answer = self._ok  # the other lists are empty
                if self.behaviour == "churn" and b"/resourceclaims" in request:
                    answer = self._new_claims
                if self.behaviour in ("fat_pods", "huge_pod") and b"/pods" not in request:
                    answer = self._ok
                answer(connection)
            except OSError:
                self.closed.set()

    def _ok(self, connection: socket.socket) -> None:
        self._body(connection, EMPTY)

    def _watch(self, connection: socket.socket, streaming: bool) -> None:
        """A streaming list refused (the exporter lists instead); a watch open, and silent."""
        if streaming:
            body = b'{"kind":"Status","status":"Failure","reason":"Invalid","code":422}'
            connection.sendall(
                b"HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            return
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.closed.wait(300)

    def _fat_pods(self, connection: socket.socket) -> None:
        self._body(connection, FAT_PODS)

    def _huge_pod(self, connection: socket.socket) -> None:
        self._body(connection, HUGE_POD)

    def _endless(self, connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n[")
        while True:  # slowly: the deadline, not the size limit, ends it
            connection.sendall(b" " * 65536)
            time.sleep(0.05)

    def _huge(self, connection: socket.socket) -> None:
        size = 500 * 2**20
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        block = b" " * 2**20
        for _ in range(500):
            connection.sendall(block)

    def _big(self, connection: socket.socket) -> None:
        """A list of 200 MiB, below the old default cap: read whole, it cannot fit 192 MiB."""
        head, tail = b'{"kind":"List","metadata":{},"items":[', b"]}"
        size = 200 * 2**20
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(head) + size + len(tail), head)
        )
        block = b" " * 2**20
        for _ in range(200):
            connection.sendall(block)
        connection.sendall(tail)

    def _bare(self, connection: socket.socket) -> None:
        self._body(connection, BARE)

    def _fat(self, connection: socket.socket) -> None:
        self._body(connection, FAT)

    def _body(self, connection: socket.socket, body: bytes) -> None:
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    def _churn(self, connection: socket.socket) -> None:
        """Pods refused (the claims are new at every list, the other lists empty)."""
        body = b'{"kind":"Status","status":"Failure","reason":"Forbidden","code":403}'
        connection.sendall(
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )

    def _new_claims(self, connection: socket.socket) -> None:
        """3,000 claims none of which was in the list before (a batch cluster's churn)."""
        with self._lock:
            self.lists += 1
            batch = self.lists
        self._body(connection, claims(f"b{batch}", 3000))

    def _bomb(self, connection: socket.socket) -> None:
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s"
            % (len(BOMB), BOMB)
        )

    def _headers(self, connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\n")
        while True:
            connection.sendall(b"X-Filler: " + b"y" * 8000 + b"\r\n")

    def _line(self, connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nX-Long: " + b"y" * 20000 + b"\r\n\r\n{}")

    def close(self) -> None:
        self._server.close()
