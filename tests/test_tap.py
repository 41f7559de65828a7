"""The twistd plugin: options, the service tree, plugin discovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.application.service import IService, IServiceMaker
from twisted.internet.testing import MemoryReactorClock
from twisted.plugin import IPlugin, getPlugins
from zope.interface.verify import verifyObject

from kdraexp.kubeconfig import ClusterConfig
from kdraexp.service import KubeClientService, ListeningService, QuietSite, Settings, build_service
from kdraexp.tap import Options


def parse(*args: str) -> Options:
    options = Options()
    options.parseOptions(list(args))
    return options


def test_defaults() -> None:
    """tcp:8080, 10 s, 500 a page, the cluster."""
    assert parse().settings == Settings("tcp:8080", 10.0, 500, None)


def test_values() -> None:
    """Every option is read."""
    options = parse(
        "--listen",
        "tcp:9000:interface=127.0.0.1",
        "--timeout",
        "2.5",
        "--page-size",
        "50",
        "--source",
        "file:/x.yaml",
    )
    assert options.settings == Settings("tcp:9000:interface=127.0.0.1", 2.5, 50, "/x.yaml")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "0"], "--timeout: expected seconds greater than 0, got '0'"),
        (["--timeout", "inf"], "--timeout: expected seconds greater than 0, got 'inf'"),
        (["--timeout", "soon"], "--timeout: expected seconds greater than 0, got 'soon'"),
        (["--page-size", "0"], "--page-size: expected a whole number of at least 1, got '0'"),
        (["--page-size", "1.5"], "--page-size: expected a whole number of at least 1, got '1.5'"),
        (["--source", "file:"], "--source 'file:': expected 'cluster' or 'file:PATH'"),
        (["--source", "kube"], "--source 'kube': expected 'cluster' or 'file:PATH'"),
        (["--listen", "bogus:1"], "--listen 'bogus:1': Unknown endpoint type: 'bogus'"),
        (["--nope"], "option --nope not recognized"),
        (
            ["--metric-allowlist", "a", "--metric-denylist", "b"],
            "--metric-allowlist and --metric-denylist are mutually exclusive",
        ),
        (
            ["--metric-denylist", "kube_(x"],
            "--metric-denylist: 'kube_(x' is not a regular expression: "
            "missing ), unterminated subpattern at position 5",
        ),
        (
            ["--resources", "pods"],
            "--resources: expected some of deviceclasses, devicetaintrules, "
            "resourceslices, resourceclaims, got 'pods'",
        ),
    ],
)
def test_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad value: exit status 2 and one line saying what is wrong."""
    with pytest.raises(SystemExit) as caught:
        parse(*args)
    assert caught.value.code == 2
    assert capsys.readouterr().err == f"kdraexp: {message} (see twistd kdraexp --help)\n"


def test_service_tree(tmp_path: Path) -> None:
    """The client, the gatherer and the listener; the listener last, so it stops first."""
    reactor = MemoryReactorClock()
    cluster = ClusterConfig("https://127.0.0.1:6443", "test", token="t")
    top = build_service(Settings(listen="tcp:8080"), cluster, reactor)
    children = list(top)
    assert isinstance(children[0], KubeClientService)
    assert isinstance(children[-1], ListeningService)
    top.privilegedStartService()
    top.startService()
    port, factory = reactor.tcpServers[0][:2]
    assert port == 8080
    assert isinstance(factory, QuietSite)
    top.stopService()


def test_file_source_has_no_client() -> None:
    """The offline source needs no cluster and makes no client."""
    top = build_service(Settings(file="/x.yaml"), None, MemoryReactorClock())
    assert not any(isinstance(child, KubeClientService) for child in top)
    assert IService.providedBy(top)


def test_plugin_discovered() -> None:
    """twistd finds the kdraexp plugin, and it is a proper service maker."""
    makers = [p for p in getPlugins(IServiceMaker) if p.tapname == "kdraexp"]
    assert len(makers) == 1
    verifyObject(IServiceMaker, makers[0])
    verifyObject(IPlugin, makers[0])
