"""A certificate replaced in its Secret reaches the running pod through the kubelet alone.

The chart installed with ``tls.enabled`` from a kubernetes.io/tls Secret; the Secret's data
replaced through the API with a new certificate, the real kubelet swaps the volume's ``..data``
link within its sync period, and the exporter, reading the files again every 10 s, serves the
new certificate to new connections: the same pod, never restarted, its expiry in
``kube_dra_exporter_tls_certificate_not_after_timestamp_seconds``, the kubelet's HTTPS probes
green throughout, and a scrape every second losing nothing to the swap: each one reads the
exposition, the DeviceClass made once the chart is installed written in it.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trustme
from cryptography import x509

from tests.e2e.harness import wait_until
from tests.e2e.simworld import sample_values, samples
from tests.node import driver
from tests.node.cluster import BODY_LIMIT, Node

pytestmark = pytest.mark.slow
NAMESPACE = "kdraexp-tls"
RELEASE = "kde"
FULLNAME = "kde-kube-dra-exporter"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
SECRET = "kdraexp-serving"
SERVICE_DNS = f"{FULLNAME}.{NAMESPACE}.svc"
"""The name the chart's monitors verify the certificate against (their ``serverName``)."""
METRICS, TELEMETRY = 8080, 8081
SWAP_LIMIT = 180.0
"""The kubelet's sync period (a minute, jittered) and the exporter's 10 s check, with room."""


@attrs.frozen
class Served:
    """What a TLS client receives from the pod on one new connection."""

    serial: int
    not_after: float


def issue(ca: trustme.CA, days: int, *names: str) -> trustme.LeafCert:
    """A serving certificate of *ca* for *names*, expiring in *days*."""
    now = datetime.datetime.now(datetime.UTC)
    return ca.issue_cert(*names, not_after=now + datetime.timedelta(days=days))


def secret_data(ca: trustme.CA, leaf: trustme.LeafCert) -> dict[str, str]:
    """A kubernetes.io/tls Secret's data as cert-manager writes it (the CA beside the pair)."""
    pems = {
        "tls.crt": b"".join(pem.bytes() for pem in leaf.cert_chain_pems),
        "tls.key": leaf.private_key_pem.bytes(),
        "ca.crt": ca.cert_pem.bytes(),
    }
    return {key: base64.b64encode(pem).decode() for key, pem in pems.items()}


def served(certificate: x509.Certificate) -> Served:
    return Served(certificate.serial_number, certificate.not_valid_after_utc.timestamp())


def client(ca: trustme.CA) -> ssl.SSLContext:
    """A client trusting *ca* only, checking the name as Prometheus does."""
    return ssl.create_default_context(cadata=ca.cert_pem.bytes().decode())


def get(
    context: ssl.SSLContext, address: str, port: int, name: str, path: str = "/metrics"
) -> tuple[int, bytes, Served]:
    """GET *path* on a new connection to *address*, verified as *name*: (status, body, cert)."""
    raw = socket.create_connection((address, port), timeout=5)
    try:
        wrapped = context.wrap_socket(raw, server_hostname=name)
    except BaseException:
        raw.close()
        raise
    connection = http.client.HTTPSConnection(name, port, timeout=5, context=context)
    connection.sock = wrapped  # already connected, to the pod's address, verified as *name*
    try:
        der = wrapped.getpeercert(binary_form=True)
        assert der is not None
        parsed = x509.load_der_x509_certificate(der)
        connection.request("GET", path)
        answer = connection.getresponse()
        body = answer.read(BODY_LIMIT + 1)
        assert len(body) <= BODY_LIMIT, f"{path} answered more than {BODY_LIMIT} bytes"
        return answer.status, body, served(parsed)
    finally:
        connection.close()


def known(body: bytes) -> bool:
    """Whether an exposition writes the DeviceClass the test made: one series it must hold.

    A cluster without DRA objects has an empty exposition (no family has a row), which proves
    nothing of what a scrape read.
    """
    return any(
        s["deviceclass_name"] == driver.CLASS
        for s in samples(body.decode(), "kube_deviceclass_info")
    )


@attrs.define
class Scraper:
    """Scrapes the pod every second on a new connection; how each went and what it was served."""

    context: ssl.SSLContext
    address: str
    outcomes: list[tuple[float, str, int | None]] = attrs.field(factory=list)
    running: bool = True
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.running = False
        assert self.thread is not None
        self.thread.join(timeout=30)

    def _run(self) -> None:
        while self.running:
            began = time.monotonic()
            self.outcomes.append((began, *self._once()))
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))

    def _once(self) -> tuple[str, int | None]:
        try:
            code, body, certificate = get(self.context, self.address, METRICS, SERVICE_DNS)
        except (OSError, http.client.HTTPException) as error:
            return f"failed {error!r}", None
        if code != 200 or not known(body):
            return f"answered {code} {body[:200]!r}", certificate.serial
        return "ok", certificate.serial

    def failures(self) -> list[tuple[float, str]]:
        return [(when, outcome) for when, outcome, _ in self.outcomes if outcome != "ok"]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def installed(node: Node, ca: trustme.CA) -> Iterator[None]:
    """The chart with ``tls.enabled`` from a Secret made here, before the chart, as users do.

    A DeviceClass gives every scrape a series to read.
    """
    node.kube.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    node.kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": SECRET},
            "data": secret_data(ca, issue(ca, 30, SERVICE_DNS)),
        },
    )
    node.install(
        RELEASE, NAMESPACE, "--set", "tls.enabled=true", "--set", f"tls.existingSecret={SECRET}"
    )
    driver.ensure_class(node.kube)
    yield
    node.helm("uninstall", RELEASE, "--namespace", NAMESPACE)
    node.kube.delete(f"/api/v1/namespaces/{NAMESPACE}")


def probes(node: Node, uid: str) -> dict[tuple[str, str], float]:
    """The kubelet's probes of the pod so far: counts by (probe type, result)."""
    counts: dict[tuple[str, str], float] = {}
    for labels, value in sample_values(node.kubelet_metrics(), "prober_probe_total"):
        if labels.get("pod_uid") == uid:
            key = (labels["probe_type"], labels["result"])
            counts[key] = counts.get(key, 0.0) + value
    return counts


def telemetry(context: ssl.SSLContext, address: str) -> dict[str, float]:
    """The exporter's TLS telemetry, read over TLS from its telemetry listener."""
    code, body, _ = get(context, address, TELEMETRY, SERVICE_DNS)
    assert code == 200, body[:2000]
    text = body.decode()
    found = {
        name: value
        for name in ("kube_dra_exporter_tls_certificate_not_after_timestamp_seconds",)
        for _, value in sample_values(text, name)
    }
    for labels, value in sample_values(text, "kube_dra_exporter_tls_reloads_total"):
        found[f"reloads {labels['result']}"] = value
    return found


def data_link(node: Node, pod: dict[str, Any]) -> str:
    """Where the Secret volume's ``..data`` points, seen from inside the container."""
    pid = node.container_pids(pod)[0]
    return os.readlink(Path(f"/proc/{pid}/root/etc/kdraexp/tls/..data"))


@pytest.mark.timeout(600)  # the node's start, and the kubelet's sync period of a minute or more
def test_new_certificate_served_without_restart(
    node: Node, installed: None, ca: trustme.CA
) -> None:
    """The Secret replaced: same pod, no restart, new certificate, probes green, no scrape lost."""
    pod = node.ready_pod(NAMESPACE, SELECTOR)
    uid, address = pod["metadata"]["uid"], pod["status"]["podIP"]
    (status,) = pod["status"]["containerStatuses"]
    restarts = status["restartCount"]
    context = client(ca)
    path = f"/api/v1/namespaces/{NAMESPACE}/secrets/{SECRET}"
    old = node.kube.get(path)
    old_served = served(x509.load_pem_x509_certificate(base64.b64decode(old["data"]["tls.crt"])))
    wait_until(
        lambda: known(get(context, address, METRICS, SERVICE_DNS)[1]),
        60,
        "the DeviceClass in the exposition",
    )
    code, body, first = get(context, address, METRICS, SERVICE_DNS)
    assert code == 200 and known(body) and first == old_served, (first, old_served)
    assert telemetry(context, address) == {
        "kube_dra_exporter_tls_certificate_not_after_timestamp_seconds": old_served.not_after,
        "reloads success": 0.0,
        "reloads failure": 0.0,
    }
    # Probed over HTTPS on the listener (no client certificate is asked): green so far.
    wait_until(lambda: probes(node, uid).get(("Liveness", "successful")), 60, "a liveness probe")
    before = probes(node, uid)
    link = data_link(node, pod)

    # The pod's address is known now: the new certificate names it beside the Service's name.
    new = issue(ca, 90, SERVICE_DNS, address)
    new_served = served(x509.load_pem_x509_certificate(new.cert_chain_pems[0].bytes()))
    assert new_served.serial != old_served.serial
    assert new_served.not_after > old_served.not_after
    scraper = Scraper(context, address)
    scraper.start()
    try:
        wait_until(lambda: scraper.outcomes, 30, "a first scrape")
        replaced = dict(old, data=secret_data(ca, new))
        node.kube.put(path, replaced)
        put = time.monotonic()
        wait_until(
            lambda: any(serial == new_served.serial for _, _, serial in scraper.outcomes),
            SWAP_LIMIT,
            "the new certificate served to a scrape",
        )
        swapped = time.monotonic()
        print(f"new certificate served {swapped - put:.1f}s after the Secret was replaced")
        # Some scrapes after it, all of the new certificate.
        wait_until(
            lambda: sum(when > swapped for when, _, _ in scraper.outcomes) >= 3,
            30,
            "three scrapes after the swap",
        )
    finally:
        scraper.stop()

    assert data_link(node, pod) != link, "the kubelet swapped the volume's ..data"
    assert not scraper.failures(), scraper.failures()
    serials = [serial for _, _, serial in scraper.outcomes]
    first_new = serials.index(new_served.serial)
    assert set(serials[:first_new]) == {old_served.serial}, serials
    assert set(serials[first_new:]) == {new_served.serial}, serials

    # Verified as the pod's address too, as the new certificate names it.
    code, _, last = get(context, address, METRICS, address)
    assert code == 200 and last == new_served, (last, new_served)
    assert telemetry(context, address) == {
        "kube_dra_exporter_tls_certificate_not_after_timestamp_seconds": new_served.not_after,
        "reloads success": 1.0,
        "reloads failure": 0.0,
    }
    now = node.pod(NAMESPACE, pod["metadata"]["name"])
    assert now["metadata"]["uid"] == uid
    (status,) = now["status"]["containerStatuses"]
    assert status["restartCount"] == restarts and status["ready"], status
    # The kubelet kept probing, and every probe of the pod since it started succeeded.
    after = probes(node, uid)
    assert {result for _, result in after} == {"successful"}, after
    assert after[("Readiness", "successful")] > before[("Readiness", "successful")], after
    assert after[("Liveness", "successful")] > before[("Liveness", "successful")], after
