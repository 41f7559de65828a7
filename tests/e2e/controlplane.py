"""A real etcd and kube-apiserver on loopback, and a small admin client for them.

The binaries come from scripts/build-control-plane.sh (see tests/tools.py). The
API server authenticates an admin by static token, authorizes with RBAC, serves a certificate
made here, and signs ServiceAccount tokens so that TokenRequest works.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import attrs
import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from tests import tools
from tests.processes import free_port

ADMIN_TOKEN = "e2e-admin-token"
SERVICE_ADDRESS = "10.0.0.1"
"""The ``kubernetes`` Service's address: the first of ``--service-cluster-ip-range``."""
READY_TIMEOUT = 120.0


class APIError(Exception):
    """The API server answered with an error Status."""

    def __init__(self, code: int, body: dict[str, Any]) -> None:
        super().__init__(f"{code} {body.get('reason')}: {body.get('message')}")
        self.code = code
        self.body = body


@attrs.define
class Kube:
    """An admin client of the API server (synchronous; for fixtures and arrangement)."""

    server: str
    ca_pem: bytes
    token: str = ADMIN_TOKEN

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Any:
        """Send one request; return the decoded JSON answer or raise APIError."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            payload = error.read()
            try:
                raise APIError(error.code, json.loads(payload)) from None
            except ValueError:
                raise APIError(error.code, {"message": payload.decode(errors="replace")}) from None
        if not text:
            return None
        if not text.lstrip().startswith((b"{", b"[")):
            return text.decode()
        return json.loads(text)

    def create(self, path: str, obj: dict[str, Any], dry_run: bool = False) -> Any:
        return self.request("POST", path + ("?dryRun=All" if dry_run else ""), obj)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def put(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request("PUT", path, obj)

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def find(self, path: str) -> Any:
        """GET *path*; None while it does not exist (404)."""
        try:
            return self.get(path)
        except APIError as error:
            if error.code == 404:
                return None
            raise

    def patch(self, path: str, changes: dict[str, Any]) -> Any:
        """A JSON merge patch (RFC 7386): *changes* merged into the object."""
        return self.request("PATCH", path, changes, "application/merge-patch+json")


@attrs.define
class ControlPlane:
    """The running servers and where their files are."""

    kube: Kube
    port: int
    directory: Path
    processes: list[subprocess.Popen[bytes]]
    apiserver_args: list[str]

    def restart_apiserver(self) -> None:
        """Kill kube-apiserver and start it again on the same port and etcd; wait until ready.

        Killed, not stopped: its graceful shutdown waits for open watches to end.
        """
        server = self.processes[-1]
        server.kill()
        server.wait(timeout=30)
        with (self.directory / "kube-apiserver.log").open("ab") as log:
            self.processes[-1] = subprocess.Popen(
                self.apiserver_args, stdout=log, stderr=subprocess.STDOUT
            )
        _wait_ready(self)

    def stop(self) -> None:
        """Kill kube-apiserver, then stop etcd: the cluster is thrown away with its directory.

        A terminated kube-apiserver shuts down gracefully, waiting for open watches to end:
        10-30 s a test module for nothing.
        """
        self.processes[-1].kill()
        for process in reversed(self.processes[:-1]):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


GATES = (
    # DeviceTaintRule is beta but off in 1.36: served as v1beta2 when asked for.
    "--feature-gates=DRADeviceTaintRules=true",
    "--runtime-config=resource.k8s.io/v1beta2=true",
)
"""What the session's kube-apiserver enables beyond its defaults."""


def start(
    directory: Path,
    extra_args: tuple[str, ...] = (),
    identities: tuple[tuple[str, str], ...] = (),
    apiserver: Path | None = None,
    gates: tuple[str, ...] = GATES,
    pods_reach: str | None = None,
) -> ControlPlane:
    """Start etcd and kube-apiserver with their files in *directory*; wait until ready.

    *extra_args* go to kube-apiserver (a short ``--etcd-compaction-interval``, say);
    *identities* are (token, user name) pairs it accepts besides the admin's, for components
    that run with their production identity and its bootstrap RBAC.  *apiserver* is another
    kube-apiserver binary (an older release) than the control plane's, run with *gates*.
    *pods_reach* is the address pods reach it at, for a cluster with a node: it then listens
    there alone, its certificate names it and the ``kubernetes`` Service's address, the
    ``kubernetes`` Service's endpoints point at it, and ServiceAccount admission mounts a token
    into every pod, as in any cluster.
    """
    bin_dir = tools.control_plane()
    ca = trustme.CA()
    address = pods_reach or "127.0.0.1"
    names = ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc"]
    if pods_reach:
        names += [pods_reach, SERVICE_ADDRESS]
    serving = ca.issue_cert(*names)
    serving.cert_chain_pems[0].write_to_path(str(directory / "serving.crt"))
    serving.private_key_pem.write_to_path(str(directory / "serving.key"))
    (directory / "ca.crt").write_bytes(ca.cert_pem.bytes())
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (directory / "sa.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    (directory / "sa.pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    lines = [f'{ADMIN_TOKEN},admin,1,"system:masters"']
    lines += [f"{token},{user},{uid}" for uid, (token, user) in enumerate(identities, 2)]
    (directory / "tokens.csv").write_text("\n".join(lines) + "\n")
    etcd_port, peer_port, port = free_port(), free_port(), free_port()
    processes = []
    etcd_log = (directory / "etcd.log").open("wb")
    processes.append(
        subprocess.Popen(
            [
                str(bin_dir / "etcd"),
                "--name=e2e",
                f"--data-dir={directory / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
            stdout=etcd_log,
            stderr=subprocess.STDOUT,
        )
    )
    apiserver_log = (directory / "kube-apiserver.log").open("wb")
    apiserver_args = [
        str(apiserver or bin_dir / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        f"--bind-address={address}",
        f"--advertise-address={address}",
        f"--secure-port={port}",
        f"--tls-cert-file={directory / 'serving.crt'}",
        f"--tls-private-key-file={directory / 'serving.key'}",
        f"--cert-dir={directory / 'certs'}",
        f"--token-auth-file={directory / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={directory / 'sa.pub'}",
        f"--service-account-signing-key-file={directory / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24",
        *gates,
        "--profiling=false",
        *(
            ()
            if pods_reach
            # No pod runs without a node: no token to mount. A loopback advertise address is
            # refused by the endpoint reconciler from 1.37 on; no Service of the API server
            # itself is needed here.
            else ("--disable-admission-plugins=ServiceAccount", "--endpoint-reconciler-type=none")
        ),
        *extra_args,
    ]
    processes.append(
        subprocess.Popen(apiserver_args, stdout=apiserver_log, stderr=subprocess.STDOUT)
    )
    etcd_log.close()
    apiserver_log.close()
    plane = ControlPlane(
        Kube(f"https://{address}:{port}", ca.cert_pem.bytes()),
        port,
        directory,
        processes,
        apiserver_args,
    )
    _wait_ready(plane)
    return plane


def _wait_ready(plane: ControlPlane) -> None:
    processes = plane.processes
    directory = plane.directory
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        for process in processes:
            if process.poll() is not None:
                plane.stop()
                raise RuntimeError(
                    f"{process.args!r} exited with {process.returncode}; see {directory}"
                )
        try:
            if plane.kube.get("/readyz") == "ok":
                break
        except (APIError, OSError):
            pass
        if time.monotonic() > deadline:
            plane.stop()
            raise RuntimeError(f"kube-apiserver not ready within {READY_TIMEOUT:g}s")
        time.sleep(0.5)
