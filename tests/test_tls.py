"""The real client over real TLS sockets: trust, client certificates, exec plugins, deadlines."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import pytest_twisted
from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred, gatherResults

from kdraexp.app.service import KubeClientService
from kdraexp.dra.listing import DEVICE_CLASSES, RESOURCE_CLAIMS, ListError
from kdraexp.families.selection import select
from kdraexp.kube.kubeconfig import ClusterConfig, ExecConfig
from kdraexp.sources.gather import Gatherer
from kdraexp.sources.protocol import CollectionFailed
from kdraexp.telemetry.selfmetrics import CollectionStats
from kdraexp.util.reactor import IKdraReactor
from tests.collect import Recorder
from tests.objects import device_class
from tests.tlsapi import TLSAPI, serve

pytestmark = pytest.mark.slow

reactor = cast(IKdraReactor, _reactor)


async def list_classes(cluster: ClusterConfig, page_size: int = 500) -> Any:
    """List DeviceClasses through a real client service, then close its pool."""
    service = KubeClientService(cluster, reactor, page_size)
    try:
        return await service.client.fetch(DEVICE_CLASSES, Recorder())
    finally:
        await service.stopService()


async def list_error(cluster: ClusterConfig) -> ListError:
    try:
        await list_classes(cluster)
    except ListError as error:
        return error
    raise AssertionError("the list succeeded")


@pytest.fixture
def api() -> Any:
    with serve() as running:
        running.fake.add("deviceclasses", device_class("gpu", "1.5"))
        yield running


@pytest_twisted.ensureDeferred
async def test_ca_and_ip_san(api: TLSAPI) -> None:
    """A certificate with only an IP SAN verifies against the configured CA."""
    result = await list_classes(ClusterConfig(api.server, "t", ca_pem=api.ca_pem))
    assert result == 1


@pytest_twisted.ensureDeferred
async def test_unknown_ca_refused(api: TLSAPI) -> None:
    """A server signed by another CA is refused with a transport error that says why."""
    import trustme

    error = await list_error(ClusterConfig(api.server, "t", ca_pem=trustme.CA().cert_pem.bytes()))
    assert error.reason == "Transport"
    assert error.message == (
        "TLS: the API server's certificate could not be verified (not signed by the configured "
        "certificate-authority, or expired); check certificate-authority or the in-cluster ca.crt"
    )


@pytest_twisted.ensureDeferred
async def test_insecure_skip_verify(api: TLSAPI) -> None:
    """insecure-skip-tls-verify connects without a CA."""
    assert (await list_classes(ClusterConfig(api.server, "t", insecure=True))) == 1


@pytest_twisted.ensureDeferred
async def test_tls_server_name() -> None:
    """tls-server-name verifies a certificate that does not name the address dialled."""
    with serve(names=("kubernetes.default.svc",)) as named:
        named.fake.add("deviceclasses", device_class("gpu"))
        error = await list_error(ClusterConfig(named.server, "t", ca_pem=named.ca_pem))
        assert error.reason == "Transport"
        assert error.message.startswith(
            "TLS: the API server's certificate is not valid for 127.0.0.1 (it names other hosts "
            "or addresses): use the server's name in server:, or set tls-server-name"
        )
        result = await list_classes(
            ClusterConfig(
                named.server, "t", ca_pem=named.ca_pem, tls_server_name="kubernetes.default.svc"
            )
        )
        assert result == 1


@pytest_twisted.ensureDeferred
async def test_client_certificate() -> None:
    """A server that requires a client certificate accepts ours and refuses no certificate."""
    with serve(require_client_certificate=True) as mtls:
        assert mtls.client_ca is not None
        mtls.fake.add("deviceclasses", device_class("gpu"))
        client = mtls.client_ca.issue_cert("kdraexp@example.com")
        cert = b"".join(blob.bytes() for blob in client.cert_chain_pems)
        key = client.private_key_pem.bytes()
        cluster = ClusterConfig(
            mtls.server, "t", ca_pem=mtls.ca_pem, client_cert_pem=cert, client_key_pem=key
        )
        assert (await list_classes(cluster)) == 1
        error = await list_error(attrs.evolve(cluster, client_cert_pem=None, client_key_pem=None))
        assert error.reason == "Transport"


@pytest_twisted.ensureDeferred
async def test_unauthorized_then_token_file_reread(api: TLSAPI, tmp_path: Path) -> None:
    """A rotated token file is picked up at the 401, and the request retried once."""
    token = tmp_path / "token"
    token.write_text("first")
    api.fake.tokens = {"first"}
    service = KubeClientService(
        ClusterConfig(api.server, "t", ca_pem=api.ca_pem, token_file=str(token)), reactor, 500
    )
    try:
        assert (await service.client.fetch(DEVICE_CLASSES, Recorder())) == 1
        token.write_text("second")
        api.fake.tokens = {"second"}
        assert (await service.client.fetch(DEVICE_CLASSES, Recorder())) == 1
    finally:
        await service.stopService()
    assert [r.authorization for r in api.fake.requests] == [
        "Bearer first",
        "Bearer first",
        "Bearer second",
    ]


def exec_plugin(tmp_path: Path, tokens: list[str], expires: str | None = None) -> ExecConfig:
    """A plugin script that hands out *tokens* in turn and counts its runs."""
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"tokens": tokens, "runs": 0}))
    script = tmp_path / "creds.py"
    script.write_text(f"""
import json, os, sys
state = json.load(open({str(state)!r}))
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False
assert os.environ["PLUGIN_SETTING"] == "on"
token = state["tokens"][min(state["runs"], len(state["tokens"]) - 1)]
state["runs"] += 1
json.dump(state, open({str(state)!r}, "w"))
status = {{"token": token}}
if {expires!r}:
    status["expirationTimestamp"] = {expires!r}
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}}))
""")
    return ExecConfig(command=sys.executable, args=(str(script),), env=(("PLUGIN_SETTING", "on"),))


def runs(tmp_path: Path) -> int:
    return int(json.loads((tmp_path / "state.json").read_text())["runs"])


@pytest_twisted.ensureDeferred
async def test_exec_plugin_cached_and_rerun_after_401(api: TLSAPI, tmp_path: Path) -> None:
    """The plugin runs once for concurrent lists, and again when the server refuses its token."""
    api.fake.tokens = {"t1"}
    cluster = ClusterConfig(
        api.server, "t", ca_pem=api.ca_pem, exec=exec_plugin(tmp_path, ["t1", "t2"])
    )
    service = KubeClientService(cluster, reactor, 500)
    try:
        results = await gatherResults(
            [
                Deferred.fromCoroutine(service.client.fetch(DEVICE_CLASSES, Recorder())),
                Deferred.fromCoroutine(service.client.fetch(RESOURCE_CLAIMS, Recorder())),
            ]
        )
        assert results == [1, 0]
        assert runs(tmp_path) == 1
        api.fake.tokens = {"t2"}
        assert (await service.client.fetch(DEVICE_CLASSES, Recorder())) == 1
        assert runs(tmp_path) == 2
    finally:
        await service.stopService()


@pytest_twisted.ensureDeferred
async def test_exec_plugin_expired_credential_rerun(api: TLSAPI, tmp_path: Path) -> None:
    """A credential past its expirationTimestamp is fetched again before use."""
    cluster = ClusterConfig(
        api.server,
        "t",
        ca_pem=api.ca_pem,
        exec=exec_plugin(tmp_path, ["a", "b"], "2000-01-01T00:00:00Z"),
    )
    service = KubeClientService(cluster, reactor, 500)
    try:
        await service.client.fetch(DEVICE_CLASSES, Recorder())
        await service.client.fetch(DEVICE_CLASSES, Recorder())
    finally:
        await service.stopService()
    assert runs(tmp_path) == 2
    assert [r.authorization for r in api.fake.requests] == ["Bearer a", "Bearer b"]


@pytest_twisted.ensureDeferred
async def test_exec_plugin_failure_is_reported(api: TLSAPI, tmp_path: Path) -> None:
    """A failing plugin fails the list with its last line of stderr."""
    script = tmp_path / "fail.py"
    script.write_text(
        "import sys\nprint('token expired, run login', file=sys.stderr)\nsys.exit(3)\n"
    )
    error = await list_error(
        ClusterConfig(
            api.server,
            "t",
            ca_pem=api.ca_pem,
            exec=ExecConfig(command=sys.executable, args=(str(script),)),
        )
    )
    assert error.reason == "Credentials"
    assert "exited with status 3: token expired, run login" in error.message


@pytest_twisted.ensureDeferred
async def test_hanging_server_hits_deadline(api: TLSAPI) -> None:
    """A server that never answers fails the collection with Timeout and the request is dropped."""
    from tests.fakeapi import Fault

    api.fake.faults["resourceslices"] = Fault(hang=True)
    service = KubeClientService(ClusterConfig(api.server, "t", ca_pem=api.ca_pem), reactor, 500)
    gatherer = Gatherer(service.client, reactor, 0.5, CollectionStats(), select())
    try:
        with pytest.raises(CollectionFailed) as caught:
            await gatherer.gather()
    finally:
        await service.stopService()
    assert [(e.resource, e.reason) for e in caught.value.errors] == [("resourceslices", "Timeout")]
    await _until(lambda: api.fake.hanging[0].called)


async def _until(condition: Any, limit: float = 5.0) -> None:
    """Poll *condition* on the reactor for at most *limit* seconds."""
    from twisted.internet.task import deferLater

    waited = 0.0
    while not condition():
        assert waited < limit, "condition not met"
        await deferLater(reactor, 0.05, lambda: None)
        waited += 0.05
