"""The installed ``twistd -n kdraexp`` end to end: scrape over real TLS, startup errors, SIGTERM."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path

import pytest
import pytest_twisted
import yaml
from twisted.internet.defer import Deferred, gatherResults

from kdraexp.serve.site import WRITE_DEADLINE
from kdraexp.telemetry.reactorturns import BUCKETS
from tests.fakeapi import Fault
from tests.kubeconfigs import write_kubeconfig
from tests.objects import SEED_CLAIM, SEED_CLASS, SEED_LINES, SEED_SLICE, claim
from tests.processes import (
    TURN_BOUND,
    free_port,
    get,
    kdraexp,
    listeners,
    ready,
    start,
    stop,
    turns_over,
    wait_for,
    watch_log,
)
from tests.tlsapi import TLSAPI, serve

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).parent.parent / "examples" / "cluster.yaml"


@pytest_twisted.ensureDeferred
async def test_smoke_against_tls_api(tmp_path: Path) -> None:
    """The installed twistd plugin, pointed at the fake API over TLS, serves the original's."""
    with serve() as api:
        api.fake.tokens = {"s3cret-token"}
        api.fake.add("resourceclaims", SEED_CLAIM)
        api.fake.add("resourceslices", SEED_SLICE)
        api.fake.add("deviceclasses", SEED_CLASS)
        config = write_kubeconfig(
            tmp_path / "kubeconfig", api.server, api.ca_pem, {"token": "s3cret-token"}
        )
        port = free_port()
        process = start(
            ["--listen", f"tcp:{port}:interface=127.0.0.1"],
            tmp_path,
            {"KUBECONFIG": str(config)},
            via_twistd=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            await wait_for(lambda: get(f"{base}/healthz"))
            code, body = await get(f"{base}/metrics")  # type: ignore[misc]
            assert code == 200
            lines = body.decode().splitlines()
            for line in SEED_LINES:
                assert line in lines
            await forty_scrapes_share_one_collection(api, base)
            api.fake.tokens = set()
            code, body = await get(f"{base}/metrics")  # type: ignore[misc]
            assert code == 500
            assert sorted(body.splitlines()) == [
                b"list deviceclasses failed: 401 Unauthorized",
                b"list resourceclaims failed: 401 Unauthorized",
                b"list resourceslices failed: 401 Unauthorized",
            ]
        finally:
            assert await stop(process) == 0
    log = (tmp_path / "output.log").read_text()
    assert "s3cret-token" not in log
    assert "Error listing resourceclaims: list resourceclaims: 401 Unauthorized" in log


@pytest_twisted.ensureDeferred
async def test_file_source_and_sigterm(tmp_path: Path) -> None:
    """--source file: serves the example without a cluster; SIGTERM ends it with status 0."""
    port = free_port()
    process = start(
        ["--listen", f"tcp:{port}:interface=127.0.0.1", "--source", f"file:{EXAMPLE}"],
        tmp_path,
        {"KUBECONFIG": "/nonexistent"},
    )
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_for(lambda: get(f"{base}/healthz"))
        code, body = await get(f"{base}/metrics")  # type: ignore[misc]
        assert code == 200
        assert b"kube_resourceslice_device_capacity_multiprocessors{" in body
    finally:
        assert await stop(process) == 0


async def forty_scrapes_share_one_collection(api: TLSAPI, base: str) -> None:
    """40 concurrent scrapes over real sockets while a list hangs: one list call per resource."""
    before = len(api.fake.requests)
    api.fake.faults["resourceclaims"] = Fault(hang=True, times=1)
    scrapes = [Deferred.fromCoroutine(get(f"{base}/metrics")) for _ in range(40)]
    await wait_for(lambda: api.fake.hanging and len(api.fake.requests) - before == 3)
    api.fake.hanging.pop().callback(json.dumps({"items": [SEED_CLAIM]}).encode())
    answers = await gatherResults(scrapes)
    assert {answer[0] if answer else None for answer in answers} == {200}
    assert len(api.fake.requests) - before == 3


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kdraexp(*args),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_no_configuration_exits_1(tmp_path: Path) -> None:
    """Nowhere to find a cluster: status 1 and one line saying what was tried."""
    result = run([], tmp_path, {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "kdraexp: no usable Kubernetes configuration: tried in-cluster "
        "(KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is not set), ~/.kube/config "
        "(not found); no current-context is set"
    ]


def test_bad_option_exits_2(tmp_path: Path) -> None:
    """A bad value: status 2 and one line."""
    result = run(["--page-size", "-3"], tmp_path, {"HOME": str(tmp_path)})
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "kdraexp: --page-size: expected a whole number of at least 1, "
        "got '-3' (see kdraexp --help)\n"
    )


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    """A port that cannot be bound: status 1 and one log line saying so."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            ["--listen", f"tcp:{port}:interface=127.0.0.1", "--source", f"file:{EXAMPLE}"],
            tmp_path,
            {"HOME": str(tmp_path)},
        )
    assert result.returncode == 1
    assert (
        f"Failed to start the metrics listener on tcp:{port}:interface=127.0.0.1: "
        "Couldn't listen on 127.0.0.1" in result.stdout
    )
    assert "Traceback" not in result.stdout + result.stderr


@pytest_twisted.ensureDeferred
async def test_large_dump_parsed_aside(tmp_path: Path) -> None:
    """A large YAML --source file (seconds to parse) is parsed in a thread.

    --timeout holds, /healthz answers meanwhile, and a later scrape has it.
    """
    from benchmarks.cluster import cluster

    dump = tmp_path / "dump.yaml"
    objects = [item for items in cluster(300).values() for item in items]
    listing = {"apiVersion": "v1", "kind": "List", "items": objects}
    dump.write_text(yaml.dump(listing, Dumper=yaml.CSafeDumper))
    port = free_port()
    process = start(
        [
            "--listen",
            f"tcp:{port}:interface=127.0.0.1",
            "--timeout",
            "0.5",
            "--source",
            f"file:{dump}",
            "--max-response-bytes",
            "256Mi",  # a YAML file may be 1/32 of it: this one is 3 MB
        ],
        tmp_path,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        await wait_for(lambda: get(f"{base}/healthz"))
        first = Deferred.fromCoroutine(get(f"{base}/metrics"))
        answered = await get(f"{base}/healthz")
        assert answered == (200, b"ok\n")
        code, body = await first  # type: ignore[misc]
        assert code == 500
        assert body.startswith(b"list ") and b"Timeout: not complete within 0.5s" in body

        async def parsed() -> bool:
            answer = await get(f"{base}/metrics")
            return answer is not None and answer[0] == 200

        await wait_for(parsed, 60, 0.5)
    finally:
        assert await stop(process) == 0


@pytest_twisted.ensureDeferred
async def test_32000_claims_without_creation_time_log_one_line_and_hold_no_turn(
    tmp_path: Path,
) -> None:
    """One field missing on every one of 32,000 claims: one line, and no turn past the bound.

    Logged at the first collection, not at the next; each value counted at both.
    """
    dump = tmp_path / "claims.json"
    items = [
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", **claim(f"c{n:05d}")}
        for n in range(32_000)
    ]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    port, telemetry = free_port(), free_port()
    process = start(
        [
            *listeners(port, telemetry),
            "--source",
            f"file:{dump}",
            "--max-response-bytes",
            "256Mi",  # a file is one response: an object per 4 KiB of it
            "--log-format",
            "json",
        ],
        tmp_path,
    )
    try:
        await wait_for(lambda: ready(port), 120, 0.5)
        assert (await get(f"http://127.0.0.1:{port}/metrics", timeout=120))[0] == 200  # type: ignore[index]
        code, body = await get(f"http://127.0.0.1:{telemetry}/metrics")  # type: ignore[misc]
        assert code == 200
    finally:
        assert await stop(process) == 0
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in body.decode().splitlines()
        if line and not line.startswith("#")
    }
    counted = (
        'kube_dra_exporter_invalid_values_total{field="metadata.creationTimestamp",'
        'resource="resourceclaims"}'
    )
    assert samples[counted] == 64_000  # the collection at start, and the scrape's
    turns = "kube_dra_exporter_reactor_turn_seconds"
    assert samples[f"{turns}_count"] > 0
    bound = next(b for b in BUCKETS if b >= TURN_BOUND)
    assert samples[f'{turns}_bucket{{le="{bound}"}}'] == samples[f"{turns}_count"]
    records = [json.loads(line) for line in (tmp_path / "output.log").read_text().splitlines()]
    problems = [r["msg"] for r in records if r["logger"] == "kdraexp.sources.problemlog"]
    assert problems == [
        "32000 problems with resourceclaims metadata.creationTimestamp, each logged once while it"
        " lasts: ResourceClaim workloads/c00000 creationTimestamp: no timestamp; ResourceClaim"
        " workloads/c00001 creationTimestamp: no timestamp; ResourceClaim workloads/c00002"
        " creationTimestamp: no timestamp; and 31997 more"
    ]


def test_command_help_and_version(tmp_path: Path) -> None:
    """``kdraexp --help`` and ``--version`` speak of kdraexp, not of twistd."""
    from kdraexp import __version__

    result = run(["--help"], tmp_path, {"HOME": str(tmp_path)})
    assert result.returncode == 0
    assert result.stdout.startswith("Usage: kdraexp ")
    assert "twistd" not in result.stdout.lower()
    for option in ("--listen", "--telemetry-listen", "--log-level", "--log-format"):
        assert option in result.stdout
    result = run(["--version"], tmp_path, {"HOME": str(tmp_path)})
    assert (result.returncode, result.stdout) == (0, f"kdraexp {__version__}\n")
    result = run(["--log-level", "chatty"], tmp_path, {"HOME": str(tmp_path)})
    assert result.returncode == 2
    assert "--log-level 'chatty': expected one of debug, info, warn, error, critical" in (
        result.stderr
    )


@pytest_twisted.ensureDeferred
async def test_telemetry_while_lists_fail_and_quiet_logs(tmp_path: Path) -> None:
    """While every list fails, the telemetry port still has the errors; the exporter is ready.

    Readiness waits for the collection made at start, failed or not, not for the API.  The log
    says where it listens once bound, and nothing of Twisted's own at info.
    """
    with serve() as api:
        api.fake.tokens = {"right"}
        config = write_kubeconfig(
            tmp_path / "kubeconfig", api.server, api.ca_pem, {"token": "wrong"}
        )
        port, telemetry = free_port(), free_port()
        process = start(
            [
                *("--listen", f"127.0.0.1:{port}"),
                *("--telemetry-listen", f"127.0.0.1:{telemetry}"),
                *("--log-format", "json"),
            ],
            tmp_path,
            {"KUBECONFIG": str(config)},
        )
        try:
            await wait_for(lambda: ready(port))
            assert (await get(f"http://127.0.0.1:{port}/metrics"))[0] == 500  # type: ignore[index]
            code, body = await get(f"http://127.0.0.1:{telemetry}/metrics")  # type: ignore[misc]
            assert code == 200
            lines = body.decode().splitlines()
            assert (  # the collection made at start, and the scrape's
                'kube_dra_exporter_list_errors_total{reason="Unauthorized",resource="resourceclaims"}'
                " 2.0" in lines
            )
            assert any(
                line.startswith(
                    'kube_dra_exporter_http_requests_total{code="500",handler="metrics",'
                    'listener="main"}'
                )
                for line in lines
            )
        finally:
            assert await stop(process) == 0
    records = [json.loads(line) for line in (tmp_path / "output.log").read_text().splitlines()]
    messages = [r["msg"] for r in records]
    assert f"Serving metrics on 127.0.0.1:{port} (127.0.0.1:{port})" in messages
    assert f"Serving telemetry on 127.0.0.1:{telemetry} (127.0.0.1:{telemetry})" in messages
    assert not [m for m in messages if "factory" in m.lower() or "Port" in m]
    assert all(r["logger"].startswith("kdraexp") or r["level"] != "info" for r in records)


@pytest_twisted.ensureDeferred
async def test_shutdown_during_scrape_is_quiet(tmp_path: Path) -> None:
    """SIGTERM while a list hangs: status 0, and no error logged for the abandoned scrape."""
    with serve() as api:
        api.fake.tokens = {"t"}
        api.fake.faults["resourceclaims"] = Fault(hang=True)
        config = write_kubeconfig(tmp_path / "kubeconfig", api.server, api.ca_pem, {"token": "t"})
        port = free_port()
        process = start(
            ["--listen", f"127.0.0.1:{port}", "--log-format", "json"],
            tmp_path,
            {"KUBECONFIG": str(config)},
        )
        try:
            await wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz"))
            scrape = Deferred.fromCoroutine(get(f"http://127.0.0.1:{port}/metrics"))
            await wait_for(lambda: api.fake.hanging)
        finally:
            assert await stop(process) == 0
        with contextlib.suppress(Exception):  # the connection may be dropped: either is fine
            await scrape
    records = [json.loads(line) for line in (tmp_path / "output.log").read_text().splitlines()]
    assert [r for r in records if r["level"] in ("error", "critical")] == []
    assert any(r["msg"].startswith("Stopping") for r in records)


@pytest_twisted.ensureDeferred
async def test_healthz_through_a_flood_of_slow_clients(tmp_path: Path) -> None:
    """600 clients hold connections with unfinished headers: /healthz still answers.

    The process may open 400 files, so without a connection limit the flood would take them all.
    """
    import socket

    from twisted.internet import reactor
    from twisted.web.client import HTTPConnectionPool

    port = free_port()
    process = start(
        ["--listen", f"127.0.0.1:{port}", "--source", f"file:{EXAMPLE}"],
        tmp_path,
        open_files=400,
    )
    slow: list[socket.socket] = []
    try:
        await wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz"))
        for _ in range(600):
            client = socket.create_connection(("127.0.0.1", port))
            client.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: a")
            slow.append(client)
        fresh = HTTPConnectionPool(reactor, persistent=False)  # a new connection, as a probe
        answer = await get(f"http://127.0.0.1:{port}/healthz", timeout=20, pool=fresh)
        assert answer == (200, b"ok\n")
        assert process.poll() is None
    finally:
        for client in slow:
            client.close()
        assert await stop(process) == 0


async def test_clients_that_never_read_are_shed_and_a_burst_is_answered(tmp_path: Path) -> None:
    """260 clients ask for a 22 MB /metrics and never read it: /healthz answers at once.

    A body that large outlasts the socket buffers of every reader many times over, so each
    connection resumes and pauses again while it is shed: the write deadline must hold across that.

    After them, a burst of 2,000 clients is answered in full: at the connection limit new
    clients wait to be accepted instead of being turned away.
    """
    import json
    import socket
    import time

    from twisted.internet import reactor
    from twisted.web.client import HTTPConnectionPool

    from benchmarks.cluster import cluster

    dump = tmp_path / "dump.json"
    objects = [item for items in cluster(1100).values() for item in items]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    port = free_port()
    process = start(["--listen", f"127.0.0.1:{port}", "--source", f"file:{dump}"], tmp_path)
    base = f"http://127.0.0.1:{port}"
    readers: list[socket.socket] = []
    try:
        await wait_for(lambda: get(f"{base}/healthz"))
        code, body = await get(f"{base}/metrics", timeout=60)  # type: ignore[misc]
        assert code == 200 and len(body) > 20_000_000
        for _ in range(260):
            reader = socket.socket()
            reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            reader.connect(("127.0.0.1", port))
            reader.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            readers.append(reader)
        await wait_for(lambda: get(f"{base}/healthz"), 30)  # the 260 are being answered
        fresh = HTTPConnectionPool(reactor, persistent=False)
        started = time.monotonic()
        answer = await get(f"{base}/healthz", timeout=5, pool=fresh)
        assert answer == (200, b"ok\n"), time.monotonic() - started
        burst = HTTPConnectionPool(reactor, persistent=False)
        burst.maxPersistentPerHost = 0
        answers = await gatherResults(
            [
                Deferred.fromCoroutine(get(f"{base}/healthz", timeout=120, pool=burst))
                for _ in range(2000)
            ]
        )
        assert [a for a in answers if a != (200, b"ok\n")] == []
        assert process.poll() is None
    finally:
        for reader in readers:
            reader.close()
        assert await stop(process) == 0


async def test_a_reader_that_stops_reading_is_dropped_after_the_write_deadline(
    tmp_path: Path,
) -> None:
    """20 clients ask for a 22 MB /metrics and never read it: each is dropped within the deadline.

    Below the connection limit nothing is shed: only the write deadline ends them.  The kernel
    takes part of the body into each client's buffers, so each connection resumes and pauses
    again while it is answered; the resume used to cancel the deadline its pause had just set,
    and the connections were held until the clients went.
    """
    import json
    import socket

    from benchmarks.cluster import cluster

    dump = tmp_path / "dump.json"
    objects = [item for items in cluster(1100).values() for item in items]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    port = free_port()
    process = start(["--listen", f"127.0.0.1:{port}", "--source", f"file:{dump}"], tmp_path)
    readers: list[socket.socket] = []
    try:
        await wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz"))
        for _ in range(20):
            reader = socket.create_connection(("127.0.0.1", port))
            reader.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            readers.append(reader)
        clients = {reader.getsockname()[1] for reader in readers}
        await wait_for(lambda: _held(port, clients) == len(readers), 30)  # being answered
        await wait_for(lambda: _held(port, clients) == 0, WRITE_DEADLINE + 30, step=1)
        assert process.poll() is None
    finally:
        for reader in readers:
            reader.close()
        assert await stop(process) == 0


def _held(port: int, clients: set[int]) -> int:
    """How many of the *clients* (by port) the exporter holds open on *port* (/proc/net/tcp)."""
    held = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if state == "01" and int(local.split(":")[1], 16) == port:
            held += int(remote.split(":")[1], 16) in clients
    return held


async def test_clients_that_hang_up_mid_answer_log_nothing_alarming(tmp_path: Path) -> None:
    """A client gone halfway through a body (a scrape timing out) is no error or critical log."""
    import json
    import socket

    from benchmarks.cluster import cluster

    dump = tmp_path / "dump.json"
    objects = [item for items in cluster(300).values() for item in items]
    dump.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    port = free_port()
    process = start(
        ["--listen", f"127.0.0.1:{port}", "--source", f"file:{dump}", "--log-format", "json"],
        tmp_path,
    )
    try:
        await wait_for(lambda: get(f"http://127.0.0.1:{port}/healthz"))
        for _ in range(20):
            client = socket.create_connection(("127.0.0.1", port))
            client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(65536).startswith(b"HTTP/1.1 200")  # the answer has begun
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")
            client.close()  # a reset, with most of the body unsent
        assert await get(f"http://127.0.0.1:{port}/healthz") == (200, b"ok\n")
    finally:
        assert await stop(process) == 0
    records = [json.loads(line) for line in (tmp_path / "output.log").read_text().splitlines()]
    assert [r for r in records if r["level"] in ("error", "critical")] == []


def test_kubeconfig_alias_bomb_exits_1_at_once(tmp_path: Path) -> None:
    """A kubeconfig whose YAML aliases expand to billions: status 1 and one line, not a hang."""
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        below = f"*a{level - 1}"
        levels.append(f"a{level}: &a{level} [{', '.join([below] * 9)}]")
    config = tmp_path / "bomb.yaml"
    config.write_text(
        "\n".join(levels)
        + "\napiVersion: v1\nkind: Config\ncurrent-context: c\n"
        + "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        + "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        + "users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, "
        + "command: x, args: *a9}}}]\n"
    )
    result = run([], tmp_path, {"KUBECONFIG": str(config), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].endswith(
        "its YAML aliases expand to more than 100,000 values"
    ), result.stderr


def test_slow_turns_are_read_from_an_exporter_s_log_once_each(tmp_path: Path) -> None:
    """What fails a test: each turn over the bound, read once, a line being written once ended."""
    output = tmp_path / "output.log"
    line = "2026-12-07T21:00:00Z warn  [kdraexp.telemetry.reactorturns] A turn of the reactor took"
    output.write_text(f"{line} 0.300s (over 0.1s)\n{line} 1.500s (over 0.1s)\n{line} 2.0")
    watch_log(output)
    assert turns_over(1.0) == [f"{line} 1.500s (over 0.1s)"]
    assert turns_over(1.0) == []
    with output.open("a") as more:
        more.write("00s (over 0.1s)\n")
    assert turns_over(1.0) == [f"{line} 2.000s (over 0.1s)"]
