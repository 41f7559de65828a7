"""A prober in a process of its own, as the kubelet is: GET a URL on a new connection, repeatedly.

``python -m tests.prober URL EVERY`` asks *URL* every *EVERY* seconds on a new connection (over
HTTPS without verifying the certificate, as the kubelet's HTTPS probes do) and prints one line a
probe, ``STATUS SECONDS`` or ``error SECONDS WHAT``, until its standard input closes.  Being a
process of its own, its figures are the exporter's, not those of a test's threads sharing one
interpreter with the hostile clients.
"""

from __future__ import annotations

import http.client
import ssl
import sys
import threading
import time
from urllib.parse import urlsplit

TIMEOUT = 10.0
"""Seconds a probe may take before it is an error (the kubelet's default is 1 s: a figure
above that is a failed probe, printed rather than cut off)."""


def probe(url: str, context: ssl.SSLContext) -> str:
    """One probe (over HTTPS with *context*): its line."""
    parts = urlsplit(url)
    began = time.monotonic()
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=TIMEOUT, context=context
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=TIMEOUT)
    try:
        connection.request("GET", parts.path)
        response = connection.getresponse()
        response.read()
        return f"{response.status} {time.monotonic() - began:.4f}"
    except (OSError, http.client.HTTPException) as error:
        return f"error {time.monotonic() - began:.4f} {error!r}"
    finally:
        connection.close()


def unverified() -> ssl.SSLContext:
    """A client's context that verifies nothing, made once, as the kubelet's prober keeps one.

    Made for each probe, a default context loads the system's CA bundle: 40 ms of CPU each,
    which on a small machine the prober took from the exporter it measured.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def main() -> None:
    """Probe until standard input closes."""
    url, every = sys.argv[1], float(sys.argv[2])
    context = unverified()
    closed = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not closed.wait(every):
        print(probe(url, context), flush=True)


if __name__ == "__main__":
    main()
