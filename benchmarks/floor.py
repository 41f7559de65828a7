"""The floor: fetch every page of the three lists and decode them, nothing else.

Run as ``python -m benchmarks.floor PORT PAGE_SIZE CA TOKEN``: it prints the seconds taken,
fetching the three lists one after another over keep-alive HTTPS connections (trusting the CA
file, with the bearer token, as the exporter asks) and decoding each page with the fastest JSON
decoder available (orjson when installed, else msgspec).
"""

from __future__ import annotations

import http.client
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any


def decoder() -> Callable[[bytes], Any]:
    """The fastest JSON decoder installed."""
    try:
        import orjson

        return orjson.loads
    except ImportError:
        import msgspec

        return msgspec.json.decode


def fetch_all(
    port: int, page_size: int, decode: Callable[[bytes], Any], ca: str, token: str
) -> int:
    """Fetch and decode every page; return the number of objects."""
    objects = 0
    context = ssl.create_default_context(cafile=ca)
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context)
    headers = {"Authorization": f"Bearer {token}"}
    for plural in ("resourceclaims", "resourceslices", "deviceclasses"):
        token = ""
        while True:
            path = f"/apis/resource.k8s.io/v1/{plural}?limit={page_size}"
            if token:
                path += f"&continue={token}"
            connection.request("GET", path, headers=headers)
            page = decode(connection.getresponse().read())
            objects += len(page["items"])
            token = page["metadata"].get("continue", "")
            if not token:
                break
    connection.close()
    return objects


def main() -> None:
    """Print the seconds one fetch-and-decode of every page takes."""
    port, page_size, ca, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    decode = decoder()
    start = time.perf_counter()
    fetch_all(port, page_size, decode, ca, token)
    print(f"{time.perf_counter() - start:.6f}")


if __name__ == "__main__":
    main()
