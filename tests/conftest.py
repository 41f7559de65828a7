"""Shared fixtures: synchronous Deferred helpers and an in-memory exporter over the fake API."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import attrs
import pytest
from hypothesis import settings
from treq.testing import RequestTraversalAgent, StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from kdraexp.families.selection import Selection, select
from kdraexp.kube.client import KubeListClient
from kdraexp.kube.credentials import Credentials
from kdraexp.kube.kubeconfig import ClusterConfig
from kdraexp.kube.transport import Limits
from kdraexp.serve.web import ExporterApp, TelemetryApp
from kdraexp.sources.gather import Gatherer
from kdraexp.telemetry.selfmetrics import CollectionStats, registry
from tests import tools
from tests.fakeapi import FakeKubeAPI

T = TypeVar("T")
_unavailable: list[str] = []

# Examples are checked, not timed: a loaded CI machine must not turn a slow example into a failure.
settings.register_profile("kdraexp", deadline=None)
settings.load_profile("kdraexp")


def _end_to_end(item: pytest.Item) -> bool:
    return "tests/e2e/" in item.path.as_posix()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the Go tools the collected tests need; without them skip those tests (not in CI).

    The slow builds (tests/tools.py's stages) begin at once, one after another, beside the tests
    that need none of them; the tests that do run after those, in the order their builds finish
    (the end-to-end ones after the others that wait for the same build), so that each waits as
    little as it can.
    """

    def order(item: pytest.Item) -> tuple[int, bool]:
        needed = tools.stages(item.path.as_posix())
        return max((tools.STAGES.index(s) + 1 for s in needed), default=0), _end_to_end(item)

    items.sort(key=order)
    if shutil.which("go"):
        tools.start_builds(*{s for item in items for s in tools.stages(item.path.as_posix())})
    for fragment, builders in tools.NEEDS.items():
        needing = [item for item in items if fragment in item.path.as_posix()]
        if not needing:
            continue
        try:
            for build in builders:
                if build in tools.BACKGROUND and shutil.which("go"):
                    continue  # started above
                build()
        except tools.ToolUnavailable as error:
            reason = f"{fragment} not run: {error}"
            if os.environ.get("CI") == "true":
                raise pytest.UsageError(reason) from None
            _unavailable.append(reason)
            for item in needing:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """Before a test, outside its timeout: wait for the slow builds it needs."""
    tools.wait_for(*tools.stages(item.path.as_posix()))
    yield


@pytest.fixture(autouse=True)
def reactor_turns(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the test, fail it if an exporter it started held its reactor past the bound."""
    from tests import processes  # imports the reactor: once pytest-twisted has installed it

    yield
    slow = processes.turns_over(processes.TURN_BOUND)
    if slow and request.node.get_closest_marker("stalls") is None:
        pytest.fail(
            f"a turn of an exporter's reactor passed {processes.TURN_BOUND:g}s"
            f" (KDRAEXP_TEST_TURN_BOUND):\n" + "\n".join(slow[:5]),
            pytrace=False,
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say loudly which tests did not run for want of a tool."""
    for reason in _unavailable:
        terminalreporter.write_line(f"!!! {reason}", red=True, bold=True)


@pytest.fixture(params=sorted(tools.PROMETHEUS))
def prometheus_release(request: pytest.FixtureRequest) -> Path:
    """The directory of ``prometheus`` and ``promtool`` of each release checked (tests/tools.py)."""
    directory: Path = tools.PROMETHEUS[request.param]()
    return directory


def result_of(d: Deferred[T]) -> T:
    """The result of a Deferred that has fired; raise its failure."""
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    if isinstance(box[0], Failure):
        box[0].raiseException()
    return box[0]  # type: ignore[no-any-return]


def has_fired(d: Deferred[Any]) -> bool:
    """Whether *d* has a result (a Deferred waiting on another one has not)."""
    box: list[bool] = []

    def seen(result: object) -> object:
        box.append(True)
        return result

    d.addBoth(seen)
    return bool(box)


def failure_of(d: Deferred[Any]) -> Failure:
    """The failure of a Deferred that has failed."""
    box: list[Any] = []
    d.addBoth(box.append)
    assert box, "the Deferred has not fired"
    assert isinstance(box[0], Failure), f"expected a failure, got {box[0]!r}"
    return box[0]


@attrs.define
class Exporter:
    """An exporter wired in memory: fake API <- client <- gatherer <- web, all on *clock*."""

    fake: FakeKubeAPI
    clock: Clock
    stats: CollectionStats
    gatherer: Gatherer
    web: Any
    """A StubTreq over the exporter (its methods are made at run time, so untyped)."""
    agent: RequestTraversalAgent
    resource: Any
    """The exporter's root resource, for requests that bypass treq's gzip decoding."""
    telemetry: Any
    """A StubTreq over the telemetry listener's resource."""
    app: ExporterApp
    """The main listener's app (its resource is :attr:`resource`)."""

    def settle(self) -> None:
        """Deliver what is in flight between the fake API, the exporter and its clients."""
        for _ in range(100):
            self.agent.flush()
            self.web.flush()

    def get(
        self, path: str, headers: dict[str, str] | None = None, *, telemetry: bool = False
    ) -> tuple[int, dict[str, str], bytes]:
        """GET *path* from the exporter (or its telemetry listener); code, headers, body."""
        web = self.telemetry if telemetry else self.web
        pending = web.get(f"http://exporter{path}", headers=headers or {})
        self.settle()
        response = result_of(pending)
        content = response.content()
        self.settle()
        body = result_of(content)
        names = {k.decode().lower(): v[0].decode() for k, v in response.headers.getAllRawHeaders()}
        return response.code, names, body


def in_memory_client(
    fake: FakeKubeAPI,
    clock: Clock,
    page_size: int = 500,
    limits: Limits = Limits(),  # noqa: B008 - frozen
    **cluster: Any,
) -> tuple[KubeListClient, RequestTraversalAgent]:
    """A real KubeListClient whose HTTP goes to *fake* in memory."""
    agent = RequestTraversalAgent(fake.app.resource())
    config = ClusterConfig(server="https://api.example:6443", origin="test", **cluster)
    credentials = Credentials(config, clock)
    client = KubeListClient(agent, config.server, credentials, page_size, limits, clock=clock)
    return client, agent


@pytest.fixture
def clock() -> Clock:
    """A clock the test moves."""
    return Clock()


@pytest.fixture
def fake() -> FakeKubeAPI:
    """An empty fake API server."""
    return FakeKubeAPI()


@pytest.fixture
def exporter(fake: FakeKubeAPI, clock: Clock) -> Exporter:
    """The exporter over *fake*, with a 10 s collection timeout on *clock*."""
    return exporter_of(fake, clock, select())


def exporter_of(fake: FakeKubeAPI, clock: Clock, selection: Selection) -> Exporter:
    """The exporter over *fake* writing *selection*, with a 10 s collection timeout on *clock*."""
    client, agent = in_memory_client(fake, clock)
    stats = CollectionStats(10.0)
    gatherer = Gatherer(client, clock, 10.0, stats, selection)
    app = ExporterApp(gatherer, clock, ":8081")
    resource = app.app.resource()
    telemetry = StubTreq(TelemetryApp(registry(stats)).app.resource())
    return Exporter(
        fake, clock, stats, gatherer, StubTreq(resource), agent, resource, telemetry, app
    )
