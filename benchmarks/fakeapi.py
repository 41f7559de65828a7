"""A fast fake of the three DRA lists: pages encoded ahead, limit/continue honoured, counted.

Run as ``python -m benchmarks.fakeapi NODES PORT``; it prints ``ready`` when it serves.
``GET /stats`` answers the number of list requests received per resource; ``GET /delay?seconds=S``
makes every list answer S seconds late (0 restores), to hold a collection open while a burst of
scrapes arrives.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from benchmarks.cluster import cluster

PREFIX = "/apis/resource.k8s.io/v1/"
DEFAULT_LIMIT = 500


class Pages:
    """Every list's pages, encoded once per (resource, offset, limit)."""

    def __init__(self, nodes: int) -> None:
        self.items = {
            plural: [json.dumps(item, separators=(",", ":")).encode() for item in items]
            for plural, items in cluster(nodes).items()
        }
        self.encoded: dict[tuple[str, int, int], bytes] = {}
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.delay = 0.0
        for plural in self.items:
            for offset in range(0, max(1, len(self.items[plural])), DEFAULT_LIMIT):
                self.page(plural, offset, DEFAULT_LIMIT)

    def page(self, plural: str, offset: int, limit: int) -> bytes:
        """The page of *plural* starting at *offset*, encoded on first use."""
        key = (plural, offset, limit)
        with self.lock:
            body = self.encoded.get(key)
        if body is None:
            items = self.items[plural]
            end = min(offset + limit, len(items))
            metadata = {"resourceVersion": "1"}
            if end < len(items):
                metadata["continue"] = str(end)
            kind = {
                "resourceclaims": "ResourceClaimList",
                "resourceslices": "ResourceSliceList",
                "deviceclasses": "DeviceClassList",
            }[plural]
            body = (
                b'{"kind":"'
                + kind.encode()
                + b'","apiVersion":"resource.k8s.io/v1","metadata":'
                + json.dumps(metadata).encode()
                + b',"items":['
                + b",".join(items[offset:end])
                + b"]}"
            )
            with self.lock:
                self.encoded[key] = body
        return body


def serve(nodes: int, port: int) -> None:
    """Serve a cluster of *nodes* nodes on 127.0.0.1:*port* until killed."""
    pages = Pages(nodes)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            if url.path == "/stats":
                with pages.lock:
                    self._send(200, json.dumps(pages.requests).encode())
                return
            if url.path == "/delay":
                pages.delay = float(query["seconds"][0])
                self._send(200, b"{}")
                return
            plural = url.path.removeprefix(PREFIX)
            if not url.path.startswith(PREFIX) or plural not in pages.items:
                self._send(404, b'{"kind":"Status","code":404,"reason":"NotFound"}')
                return
            limit = int(query.get("limit", [str(10**9)])[0])
            offset = int(query.get("continue", ["0"])[0])
            with pages.lock:
                pages.requests[plural] += 1
            if pages.delay:
                time.sleep(pages.delay)
            self._send(200, pages.page(plural, offset, limit))

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
