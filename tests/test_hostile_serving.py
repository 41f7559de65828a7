"""Hostile clients against ``twistd -n kdraexp`` serving HTTPS behind --auth-filter.

The exporter runs in a memory cgroup of the chart's limit (192 MiB), its reviews answered by
the fake API over TLS.  While each hostile client runs, ``/healthz`` is probed as the chart's
probes reach it, by two probers in processes of their own (as the kubelet is): one over a new
HTTPS connection to the metrics listener (the chart without ``--probe-listen``), one in plain
HTTP to ``--probe-listen`` (the chart while client certificates are required), each every tenth
of a second.  Every probe must be answered 200; the median and slowest are printed (the
target is 100 ms) and the slowest held to :data:`PROBE_BOUND`.  The kernel must kill nothing in
the cgroup, and the exporter must still serve a scrape after.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import secrets
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import attrs
import pytest
import pytest_twisted
import yaml
from twisted.internet.threads import deferToThread

from kdraexp.serve.authfilter import MAX_IN_FLIGHT, REVIEW_TIMEOUT
from kdraexp.serve.handshakes import MAX_HANDSHAKES
from tests.fakeapi import Fault
from tests.kubeconfigs import write_kubeconfig
from tests.processes import (
    CHART_LIMIT,
    MemoryCgroup,
    free_port,
    kdraexp,
    memory_cgroup,
    ready,
    start,
    stop,
    wait_for,
)
from tests.test_authfilter import READER, READER_NAME
from tests.test_tlsserving import client, pair
from tests.tlsapi import TLSAPI, serve

pytestmark = pytest.mark.slow

PROBE_EVERY = 0.1
"""Seconds between two probes of /healthz."""
PROBE_BOUND = 1.0
"""Seconds the slowest probe may take: the kubelet's default ``timeoutSeconds``, past which a
probe has failed.  Ten times the 100 ms target, for a shared machine.  Before the handshakes had
bounds, half-open handshakes held probes about a second (0.97 to 1.12 s; the listener full,
paused a second at a time), so the connections held are what tells that bound's absence."""
ALLOWED = "Bearer reader-token"
CLIENT = client()
"""The clients' TLS context, made once: made for each connection it costs 40 ms of CPU (the
system's CA bundle read), which 40 clients at once took from the exporter they measured."""


@attrs.define
class Exporter:
    """The running exporter: its HTTPS port, process, cgroup and the fake API it reviews with."""

    port: int
    probes: int
    """The --probe-listen port."""
    pid: int
    cgroup: MemoryCgroup
    api: TLSAPI

    def open_files(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    yield from memory_cgroup("serving", CHART_LIMIT)


@pytest_twisted.async_yield_fixture
async def exporter(tmp_path: Path, cgroup: MemoryCgroup) -> AsyncIterator[Exporter]:
    with serve() as api:
        api.fake.tokens = {"exporter-token"}
        api.fake.users = {"reader-token": READER}
        api.fake.grants = {(READER_NAME, "get", "/metrics")}
        config = write_kubeconfig(
            tmp_path / "kubeconfig", api.server, api.ca_pem, {"token": "exporter-token"}
        )
        for name, content in pair("127.0.0.1").items():
            (tmp_path / name).write_bytes(content)
        (tmp_path / "web.yml").write_text(
            yaml.safe_dump({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}})
        )
        port, probes = free_port(), free_port()
        process = start(
            [
                "--listen",
                f"127.0.0.1:{port}",
                "--telemetry-listen",
                "",
                "--probe-listen",
                f"127.0.0.1:{probes}",
                "--tls-config",
                str(tmp_path / "web.yml"),
                "--auth-filter",
            ],
            tmp_path,
            {"KUBECONFIG": str(config)},
            via_twistd=True,
            cgroup=cgroup,
        )
        running = Exporter(port, probes, process.pid, cgroup, api)
        try:
            await wait_for(lambda: ready(probes))
            assert await deferToThread(scrape, port, ALLOWED) == 200
            yield running
            assert process.poll() is None, (tmp_path / "output.log").read_text()
            assert await deferToThread(scrape, port, ALLOWED) == 200
            assert cgroup.oom_kills() == 0
        finally:
            assert await stop(process) == 0
            print(f"peak memory of the cgroup: {(cgroup.peak() or 0) / 2**20:.1f} MiB")


def https(port: int, timeout: float = 10.0) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", port, context=CLIENT, timeout=timeout)


def scrape(port: int, authorization: str) -> int:
    """The status of one GET /metrics with *authorization*, on a connection of its own."""
    connection = https(port, timeout=30)
    try:
        connection.request("GET", "/metrics", headers={"Authorization": authorization})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@attrs.define
class Prober:
    """``python -m tests.prober``: /healthz asked every :data:`PROBE_EVERY` from a process."""

    url: str
    process: subprocess.Popen[str]
    first: str
    """The first probe's line, made before anything hostile began."""

    @classmethod
    def start(cls, url: str) -> Prober:
        """A prober of *url*, once it has made its first probe."""
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.prober", url, str(PROBE_EVERY)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        assert process.stdout is not None
        return cls(url, process, process.stdout.readline().strip())

    def stop(self) -> list[str]:
        """Its lines, one a probe, the first (made before the hostile client) left out."""
        output, _ = self.process.communicate("", timeout=60)
        return output.splitlines()


def probed(exporter: Exporter, hostile: Callable[[], None], name: str) -> None:
    """Run *hostile* while /healthz is probed both ways; each probe must be answered 200 in time."""
    probers = [
        Prober.start(f"https://127.0.0.1:{exporter.port}/healthz"),
        Prober.start(f"http://127.0.0.1:{exporter.probes}/healthz"),
    ]
    try:
        hostile()
    finally:
        lines = [prober.stop() for prober in probers]
    for prober, made in zip(probers, lines, strict=True):
        assert prober.first.startswith("200 "), prober.first
        assert made, f"no probe of {prober.url} was made while the hostile client ran"
        failures = [line for line in made if not line.startswith("200 ")]
        assert not failures, (prober.url, failures)
        seconds = sorted(float(line.split()[1]) for line in made)
        print(
            f"{name}: {len(seconds)} probes of {prober.url}, median "
            f"{seconds[len(seconds) // 2] * 1000:.0f} ms, slowest {seconds[-1] * 1000:.0f} ms"
        )
        assert seconds[-1] < PROBE_BOUND, f"{prober.url}: a probe took {seconds[-1]:.2f}s"


def client_hello() -> bytes:
    """The first flight of a real TLS client: one ClientHello record."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = CLIENT.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def connections(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes *sock* (whatever it sends first) within the socket's timeout."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


@pytest_twisted.ensureDeferred
async def test_half_open_and_slow_handshakes(exporter: Exporter) -> None:
    """300 connections that send half a ClientHello and stop, 20 that send one a byte a second.

    At most MAX_HANDSHAKES are kept, those furthest behind shed past that: the listener never
    fills with them (it did, 256 held until the idle timeout, accepting paused a second at a
    time while probes waited).
    """
    hello = client_hello()
    files = exporter.open_files()
    held: list[int] = []

    def hostile() -> None:
        half = connections(exporter.port, 300)
        slow = connections(exporter.port, 20)
        try:
            for sock in half:
                with contextlib.suppress(OSError):  # shed already
                    sock.sendall(hello[: len(hello) // 2])
            for byte in range(8):
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.send(hello[byte : byte + 1])
                time.sleep(1.0)
            held.append(exporter.open_files() - files)  # 8 s on, the 10 s deadline not yet due
        finally:
            for sock in half + slow:
                sock.close()

    await deferToThread(probed, exporter, hostile, "half-open and slow handshakes")
    print(f"connections the exporter held of the 320 after 8 s: {held[0]}")
    assert held[0] <= MAX_HANDSHAKES + 4  # and a probe's, or the API's, at that moment


@pytest_twisted.ensureDeferred
async def test_garbage_client_hellos(exporter: Exporter) -> None:
    """400 connections sending what is not a ClientHello: each is closed by the exporter.

    A record type TLS does not have, plain HTTP, a ClientHello of its announced length but
    random bytes, a record longer than TLS allows.  (A record cut short is a half-open
    handshake: above.)
    """
    hello = client_hello()
    garbage = [
        lambda: b"\x00" * 512,
        lambda: b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        lambda: hello[:9] + b"\xff" * (len(hello) - 9),
        lambda: b"\x16\x03\x01\xff\xff" + b"\xff" * 2048,
    ]
    kept: list[bool] = []

    def hostile() -> None:
        for _ in range(50):
            for make in garbage:
                opened = connections(exporter.port, 2)
                for sock in opened:
                    with contextlib.suppress(OSError):
                        sock.sendall(make())
                kept.extend(not closed_by_server(sock) for sock in opened)
                for sock in opened:
                    sock.close()
            time.sleep(0.1)

    await deferToThread(probed, exporter, hostile, "garbage ClientHellos")
    assert kept.count(True) == 0, f"{kept.count(True)} of {len(kept)} connections left open"


def huge_authorization(port: int, size: int) -> str:
    """The status line a request with a bearer token of *size* bytes gets, or how it ended."""
    tls = CLIENT.wrap_socket(
        socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="127.0.0.1"
    )
    with tls:
        request = (
            b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            + b"a" * size
            + b"\r\n\r\n"
        )
        with contextlib.suppress(OSError):  # closed before it all arrived: the answer stays
            tls.sendall(request)
        try:
            answer = tls.recv(4096)
        except (ConnectionResetError, ssl.SSLError):
            return "closed"
        return answer.split(b"\r\n", 1)[0].decode() if answer else "closed"


@pytest_twisted.ensureDeferred
async def test_huge_authorization_headers(exporter: Exporter) -> None:
    """Bearer tokens of 64 KiB to 4 MiB: answered 431 at once, without a review.

    Paced a round every :data:`PROBE_EVERY`: answered at once, the rounds would all be over
    before a probe was made.
    """
    reviews = len(exporter.api.fake.reviews)
    answers: list[str] = []

    def hostile() -> None:
        for _ in range(10):
            for size in (64 * 1024, 1024 * 1024, 4 * 1024 * 1024):
                answers.append(huge_authorization(exporter.port, size))
            time.sleep(PROBE_EVERY)

    await deferToThread(probed, exporter, hostile, "huge Authorization headers")
    print(f"answers to huge Authorization headers: {sorted(set(answers))}")
    assert set(answers) == {"HTTP/1.1 431 Request Header Fields Too Large"}, answers
    assert len(exporter.api.fake.reviews) == reviews


@pytest_twisted.ensureDeferred
async def test_reviews_that_never_answer(exporter: Exporter) -> None:
    """An API server that hangs on reviews: new tokens get 503, nothing piles up.

    A request waits for the review's timeout, or is answered at once past the bounds; the
    allowed token, cached, keeps being served.
    """
    exporter.api.fake.faults["tokenreviews"] = Fault(hang=True)
    files = exporter.open_files()
    reviews = len(exporter.api.fake.reviews)
    codes: list[int] = []
    scrapes: list[int] = []

    def hostile() -> None:
        lock = threading.Lock()

        def flood() -> None:
            for _ in range(1):
                code = scrape(exporter.port, f"Bearer {secrets.token_urlsafe(32)}")
                with lock:
                    codes.append(code)

        threads = [threading.Thread(target=flood) for _ in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(REVIEW_TIMEOUT * 20)
            scrapes.append(scrape(exporter.port, ALLOWED))

    began = time.monotonic()
    await deferToThread(probed, exporter, hostile, "reviews that never answer")
    took = time.monotonic() - began
    sent = len(exporter.api.fake.reviews) - reviews
    print(
        f"40 requests with new tokens against hanging reviews in {took:.0f}s: "
        f"{sent} reviews sent, open files {files} before, {exporter.open_files()} after"
    )
    assert codes == [503] * 40
    assert set(scrapes) == {200}
    assert sent <= MAX_IN_FLIGHT * (took / REVIEW_TIMEOUT + 1)
    await wait_for(lambda: exporter.open_files() <= files + 2, limit=REVIEW_TIMEOUT * 2)
    exporter.api.fake.faults.clear()
    exporter.api.fake.release()


@pytest.mark.parametrize(
    ("change", "line"),
    [
        (
            lambda d: (d / "tls.key").unlink(),
            "kdraexp: --tls-config {d}/web.yml: tls_server_config.key_file 'tls.key': "
            "No such file or directory (see kdraexp --help)",
        ),
        (
            lambda d: ((d / "tls.key").unlink(), (d / "tls.key").mkdir()),
            "kdraexp: --tls-config {d}/web.yml: tls_server_config.key_file 'tls.key': "
            "{d}/tls.key is not a regular file (see kdraexp --help)",
        ),
        (
            lambda d: (d / "tls.crt").unlink(),
            "kdraexp: --tls-config {d}/web.yml: tls_server_config.cert_file 'tls.crt': "
            "No such file or directory (see kdraexp --help)",
        ),
        (
            lambda d: (d / "tls.key").write_text("not a key\n"),
            "kdraexp: --tls-config the key is not an unencrypted PEM private key "
            "(see kdraexp --help)",
        ),
    ],
    ids=["missing key", "key not a file", "missing certificate", "key not PEM"],
)
def test_a_key_or_certificate_that_cannot_be_read_at_start(
    tmp_path: Path, change: Callable[[Path], object], line: str
) -> None:
    """One line and status 2, from twistd as from the command, before anything listens."""
    for name, content in pair("127.0.0.1").items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "web.yml").write_text(
        yaml.safe_dump({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}})
    )
    change(tmp_path)
    for twistd in (True, False):
        result = _run(
            kdraexp(
                "--tls-config",
                str(tmp_path / "web.yml"),
                "--listen",
                f"127.0.0.1:{free_port()}",
                "--auth-filter",
                via_twistd=twistd,
            ),
            tmp_path,
        )
        assert (result.returncode, result.stderr.splitlines()) == (2, [line.format(d=tmp_path)])


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    return subprocess.run(
        command,
        cwd=cwd,
        env={**environment, "KUBECONFIG": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
