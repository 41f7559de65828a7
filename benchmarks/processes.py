"""The exporter and its fake API as child processes, scraped and measured.

What every measurement of ``make bench`` shares: :mod:`benchmarks.run` and the modules it runs
import it, and none of them imports another.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import trustme

from benchmarks.cluster import DEVICES_PER_NODE
from benchmarks.fakeapi import SCRAPER_TOKEN

BIN = Path(sys.executable).parent
PAGE_SIZE = 500
SCRAPE_HEADERS = {"Accept": "text/plain;version=0.0.4;q=0.9,*/*;q=0.1", "Accept-Encoding": "gzip"}


def free_port() -> int:
    """A port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(
    port: int,
    path: str,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    """GET *path* on a new connection (HTTPS with *context*); (status, body)."""
    connection = (
        http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        if context is None
        else http.client.HTTPSConnection("127.0.0.1", port, timeout=300, context=context)
    )
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


TOKEN = "bench-token"
"""The bearer token the fake API asks of a list or watch, as an API server asks for one."""


@attrs.frozen
class ApiTls:
    """The fake API's certificate, from a CA of its own, and that CA for its clients."""

    ca: Path
    served: Path
    """The private key and the certificate chain, in one PEM file."""

    @classmethod
    def made(cls, directory: Path) -> ApiTls:
        """A new CA and the certificate it issued for 127.0.0.1, written into *directory*."""
        authority = trustme.CA()
        issued = authority.issue_cert("127.0.0.1")
        made = cls(directory / "api-ca.pem", directory / "api-served.pem")
        authority.cert_pem.write_to_path(str(made.ca))
        issued.private_key_and_cert_chain_pem.write_to_path(str(made.served))
        return made

    def context(self) -> ssl.SSLContext:
        """A client's context trusting the CA."""
        return ssl.create_default_context(cafile=str(self.ca))


@attrs.frozen
class ServingTls:
    """An exporter's ``--tls-config``: a certificate for 127.0.0.1 from a CA of its own."""

    config: Path
    ca: Path

    @classmethod
    def made(cls, directory: Path) -> ServingTls:
        """The web configuration, its pair and their CA, written into *directory*."""
        authority = trustme.CA()
        issued = authority.issue_cert("127.0.0.1")
        issued.cert_chain_pems[0].write_to_path(str(directory / "tls.crt"))
        issued.private_key_pem.write_to_path(str(directory / "tls.key"))
        made = cls(directory / "web.yml", directory / "serving-ca.pem")
        made.config.write_text(
            json.dumps({"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}})
        )
        authority.cert_pem.write_to_path(str(made.ca))
        return made

    def context(self) -> ssl.SSLContext:
        """A scraper's context trusting the CA."""
        return ssl.create_default_context(cafile=str(self.ca))


def api_get(port: int, tls: ApiTls, path: str) -> tuple[int, bytes]:
    """GET *path* of the fake API on a new HTTPS connection, with the token; (status, body)."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=300, context=tls.context())
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def at_once(count: int, work: Any) -> None:
    """Run *work* in *count* threads released together; raise the first error any met."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def one() -> None:
        barrier.wait()
        try:
            work()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def wait_for(condition: Any, limit: float, what: str) -> None:
    """Poll *condition* until true, at most *limit* seconds."""
    deadline = time.monotonic() + limit
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not within {limit:g}s")
        time.sleep(0.05)


class Run:
    """One cluster size: the fake API and the exporter, as child processes.

    With *api*, the exporter reads that run's fake API instead of starting one; the API
    started otherwise holds *pending* pending claims more (see benchmarks.cluster.PENDING), the
    cluster's pods *with_pods* and its Nodes *with_nodes*, and serves a cluster of *shape*
    (benchmarks.cluster.SHAPES), its claims allocated unless *claims* is false.  With *secured*
    the exporter serves over TLS (``--tls-config``) behind ``--auth-filter``, and is asked as
    Prometheus would ask it: over HTTPS, with a token the fake API's reviews allow.
    """

    def __init__(
        self,
        devices: int,
        directory: Path,
        exporter_args: list[str],
        api: Run | None = None,
        pending: int = 0,
        with_pods: bool = False,
        with_nodes: bool = False,
        shape: str = "mixed",
        claims: bool = True,
        secured: bool = False,
    ) -> None:
        self.devices = devices
        self.nodes = max(1, devices // DEVICES_PER_NODE)
        self.port = free_port()
        self.api: subprocess.Popen[str] | None = None
        self.api_port: int = api.api_port if api is not None else free_port()
        directory.mkdir(parents=True, exist_ok=True)
        self.tls: ApiTls = api.tls if api is not None else ApiTls.made(directory)
        """The fake API speaks HTTPS and asks for a bearer token, as every API server does."""
        if api is None:
            self.api = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.fakeapi",
                    str(self.nodes),
                    str(self.api_port),
                    str(pending),
                    "1" if with_pods else "0",
                    "1" if with_nodes else "0",
                    shape,
                    "1" if claims else "0",
                ],
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "FAKEAPI_CERT": str(self.tls.served), "FAKEAPI_TOKEN": TOKEN},
            )
            assert self.api.stdout is not None and self.api.stdout.readline().strip() == "ready"
        config = directory / f"kubeconfig-{devices}"
        config.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "bench",
                    "clusters": [
                        {
                            "name": "bench",
                            "cluster": {
                                "server": f"https://127.0.0.1:{self.api_port}",
                                "certificate-authority": str(self.tls.ca),
                            },
                        }
                    ],
                    "contexts": [
                        {"name": "bench", "context": {"cluster": "bench", "user": "bench"}}
                    ],
                    "users": [{"name": "bench", "user": {"token": TOKEN}}],
                }
            )
        )
        self._headers: dict[str, str] = {}
        """Headers sent with every request to the exporter (a secured one's token)."""
        self._context: ssl.SSLContext | None = None
        """How to reach the exporter over TLS (None: plain HTTP)."""
        if secured:
            serving = ServingTls.made(directory)
            exporter_args = [*exporter_args, "--tls-config", str(serving.config), "--auth-filter"]
            self._headers = {"Authorization": f"Bearer {SCRAPER_TOKEN}"}
            self._context = serving.context()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["KUBECONFIG"] = str(config)
        self.log = directory / f"exporter-{devices}.log"
        with self.log.open("wb") as log:
            self.exporter = subprocess.Popen(
                [
                    str(BIN / "kdraexp"),
                    "--telemetry-listen",
                    "",
                    "--timeout",
                    "120",
                    "--page-size",
                    str(PAGE_SIZE),
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    *exporter_args,
                ],
                cwd=directory,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for(lambda: self.get("/healthz")[0] == 200, 60, "the exporter starting")
        self.start_cpu = self.cpu()
        self.healthz_while_starting, self.start_seconds = self._healthz_while(self._until_ready)
        self.start_cpu = self.cpu() - self.start_cpu
        """What the exporter did from answering /healthz to /readyz saying ready: in list mode,
        the collection made and rendered at start; in watch mode, every resource synchronised."""

    def _until_ready(self) -> float:
        """Seconds until /readyz answers 200 (at most ten minutes)."""
        start = time.perf_counter()
        wait_for(lambda: self.get("/readyz")[0] == 200, 600, "the exporter ready")
        return time.perf_counter() - start

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """GET *path* of the exporter on a new connection, as its scrapers ask; (status, body)."""
        return get(self.port, path, {**self._headers, **(headers or {})}, self._context)

    def reviews(self) -> int:
        """Reviews the fake API has answered so far."""
        return sum(json.loads(self.api_get("/reviews")[1]).values())

    def series(self) -> dict[str, int]:
        """Series per DRA family in one uncompressed scrape."""
        code, body = self.get("/metrics")
        if code != 200:
            raise RuntimeError(f"scrape answered {code}: {body[:300]!r}")
        counts: dict[str, int] = {}
        for line in body.decode().splitlines():
            if line.startswith("kube_") and not line.startswith("kube_dra_exporter_"):
                name = line.split("{", 1)[0].split(" ", 1)[0]
                counts[name] = counts.get(name, 0) + 1
        return counts

    def list_requests(self) -> int:
        """List requests the fake API has answered so far."""
        return sum(json.loads(self.api_get("/stats")[1]).values())

    def api_get(self, path: str) -> tuple[int, bytes]:
        """GET *path* of the fake API (see :mod:`benchmarks.fakeapi`)."""
        return api_get(self.api_port, self.tls, path)

    def scrape(self) -> float:
        """Seconds one scrape takes, as Prometheus asks for it."""
        start = time.perf_counter()
        code, body = self.get("/metrics", SCRAPE_HEADERS)
        elapsed = time.perf_counter() - start
        if code != 200:
            raise RuntimeError(f"scrape answered {code}: {body[:300]!r}")
        return elapsed

    def peak_rss(self) -> int:
        """The exporter's peak resident memory so far (since :meth:`reset_peak`), in bytes.

        With its CEL evaluation process's: the sum of both peaks (what the pod may need).
        """
        return sum(self._status(pid, "VmHWM") for pid in self._pids())

    def rss(self) -> int:
        """The exporter's resident memory now, with its CEL evaluation process's, in bytes."""
        return sum(self._status(pid, "VmRSS") for pid in self._pids())

    def reset_peak(self) -> None:
        """Start measuring the peak again from now (Linux: write 5 to clear_refs)."""
        for pid in self._pids():
            Path(f"/proc/{pid}/clear_refs").write_text("5")

    def children(self) -> list[int]:
        """The processes the exporter started (its CEL evaluation process, while it runs)."""
        return self._pids()[1:]

    def _pids(self) -> list[int]:
        """The exporter and the processes it started (the CEL evaluation process)."""
        pids = [self.exporter.pid]
        for task in Path(f"/proc/{self.exporter.pid}/task").iterdir():
            with contextlib.suppress(OSError):
                pids += [int(pid) for pid in (task / "children").read_text().split()]
        return pids

    @staticmethod
    def _status(pid: int, field: str) -> int:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            return 0  # a child that ended meanwhile
        for line in lines:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {field}")

    def cpu(self) -> float:
        """CPU seconds the exporter and its CEL evaluation process have used so far."""
        used = 0.0
        for pid in self._pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            used += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return used

    def body_sizes(self) -> tuple[int, int]:
        """Bytes of one scrape's body, plain and gzip."""
        plain = self.get("/metrics")[1]
        gzipped = self.get("/metrics", SCRAPE_HEADERS)[1]
        return len(plain), len(gzipped)

    def memory_burst(self, headers: dict[str, str], count: int = 40) -> int:
        """Bytes added to the peak RSS by *count* concurrent scrapes asking with *headers*."""
        self.get("/metrics", headers)  # nothing left to render: only the writing counts
        self.reset_peak()
        before = self.rss()

        def scrape() -> None:
            code, _ = self.get("/metrics", headers)
            if code != 200:
                raise RuntimeError(f"scrape answered {code}")

        at_once(count, scrape)
        return max(0, self.peak_rss() - before)

    def floor(self) -> float:
        """Seconds a separate process takes to fetch and decode every page."""
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.floor",
                str(self.api_port),
                str(PAGE_SIZE),
                str(self.tls.ca),
                TOKEN,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return float(out.stdout)

    def healthz_during_scrape(self) -> tuple[float, float]:
        """The slowest /healthz answer while a scrape is made, and the scrape's seconds."""
        return self._healthz_while(self.scrape)

    def _healthz_while(self, work: Any) -> tuple[float, float]:
        """The slowest /healthz answer while *work* runs in a thread, and what *work* gave."""
        done = threading.Event()
        took: list[float] = []

        def working() -> None:
            try:
                took.append(work())
            finally:
                done.set()

        thread = threading.Thread(target=working)
        thread.start()
        slowest = 0.0
        while not done.is_set():
            start = time.perf_counter()
            self.get("/healthz")
            slowest = max(slowest, time.perf_counter() - start)
            time.sleep(0.02)
        thread.join()
        if not took:
            raise RuntimeError("the work measured failed (see above)")
        return slowest, took[0]

    def concurrent(self, count: int = 40) -> int:
        """List requests reaching the API while *count* scrapes arrive together.

        The fake API answers half a second late meanwhile, so that the collection is still in
        flight when the last of the scrapes arrives, however the threads are scheduled.
        """
        self.api_get("/delay?seconds=0.5")
        before = self.list_requests()
        try:
            at_once(count, self.scrape)
        finally:
            self.api_get("/delay?seconds=0")
        return self.list_requests() - before

    def stop(self) -> None:
        """Stop the exporter, and the fake API if this run started it."""
        self.exporter.terminate()
        self.exporter.wait(timeout=60)
        if self.api is not None:
            self.api.terminate()
            self.api.wait(timeout=60)
