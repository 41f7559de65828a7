"""--auth-filter under a flood of made-up tokens: the installed exporter, the fake API over TLS.

A client sends a new random token on every request, 2,000 over 20 s on 20 connections, while a
Prometheus-like scraper keeps scraping with an allowed token.  The exporter's peak memory grows
by at most :data:`MEMORY_BOUND`, the fake API receives at most :data:`REVIEWS_BOUND` reviews in
any one second, and every scrape with the allowed token is answered 200.
"""

from __future__ import annotations

import bisect
import secrets
from pathlib import Path

import pytest
import pytest_twisted
import treq
from twisted.internet import reactor
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.task import deferLater
from twisted.web.client import HTTPConnectionPool
from twisted.web.http_headers import Headers

from tests.kubeconfigs import write_kubeconfig
from tests.processes import free_port, get, memory, reset_peak, start, stop, wait_for
from tests.test_authfilter import READER, READER_NAME
from tests.tlsapi import serve

pytestmark = pytest.mark.slow

CONNECTIONS = 20
REQUESTS = 2000
SECONDS = 20.0
MEMORY_BOUND = 30 * 2**20
REVIEWS_BOUND = 50


@pytest_twisted.ensureDeferred
async def test_a_flood_of_new_tokens_is_bounded(tmp_path: Path) -> None:
    with serve() as api:
        api.fake.tokens = {"exporter-token"}
        api.fake.users = {"reader-token": READER}
        api.fake.grants = {(READER_NAME, "get", "/metrics")}
        config = write_kubeconfig(
            tmp_path / "kubeconfig", api.server, api.ca_pem, {"token": "exporter-token"}
        )
        port = free_port()
        process = start(
            [
                "--listen",
                f"tcp:{port}:interface=127.0.0.1",
                "--telemetry-listen",
                "",
                "--auth-filter",
            ],
            tmp_path,
            {"KUBECONFIG": str(config)},
        )
        base = f"http://127.0.0.1:{port}"
        allowed = {"Authorization": "Bearer reader-token"}
        try:
            await wait_for(lambda: get(f"{base}/healthz"))
            assert (await get(f"{base}/metrics", headers=allowed))[0] == 200  # type: ignore[index]
            reset_peak(process.pid)
            before = memory(process.pid)["VmRSS"]
            pool = HTTPConnectionPool(reactor, persistent=True)
            pool.maxPersistentPerHost = CONNECTIONS
            answers: dict[int, int] = {}
            scrapes: list[int] = []
            flooding = [True]

            async def flood() -> None:
                for _ in range(REQUESTS // CONNECTIONS):
                    token = secrets.token_urlsafe(32)
                    headers = Headers({b"Authorization": [f"Bearer {token}".encode()]})
                    response = await treq.get(f"{base}/metrics", headers=headers, pool=pool)
                    await response.content()
                    answers[response.code] = answers.get(response.code, 0) + 1
                    await deferLater(reactor, SECONDS * CONNECTIONS / REQUESTS, lambda: None)

            async def scrape() -> None:
                while flooding[0]:
                    answer = await get(f"{base}/metrics", headers=allowed)
                    scrapes.append(answer[0] if answer else 0)
                    await deferLater(reactor, 1.0, lambda: None)

            began = reactor.seconds()
            scraper = Deferred.fromCoroutine(scrape())
            await gatherResults([Deferred.fromCoroutine(flood()) for _ in range(CONNECTIONS)])
            flooded = reactor.seconds() - began
            flooding[0] = False
            await scraper
            peak = memory(process.pid)["VmHWM"]
            await pool.closeCachedConnections()
        finally:
            assert await stop(process) == 0
    assert sum(answers.values()) == REQUESTS
    assert set(answers) <= {401, 503}, answers
    assert scrapes and set(scrapes) == {200}, scrapes
    times = sorted(review.at for review in api.fake.reviews)
    busiest = max(bisect.bisect_left(times, at + 1.0) - i for i, at in enumerate(times))
    print(
        f"{REQUESTS} requests in {flooded:.0f}s: reviews {len(times)}, busiest second "
        f"{busiest}, answers {answers}, peak RSS growth {(peak - before) / 2**20:.1f} MiB, "
        f"scrapes {len(scrapes)}"
    )
    assert busiest <= REVIEWS_BOUND
    assert peak - before <= MEMORY_BOUND, (before, peak)
