"""The twistd plugin: options, the service tree, plugin discovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import attrs
import pytest
import trustme
from twisted.application.service import IService, IServiceMaker
from twisted.internet.testing import MemoryReactorClock
from twisted.plugin import IPlugin, getPlugins
from zope.interface.verify import verifyObject

from kdraexp.app.service import KubeClientService, ListeningService, Settings, build_service
from kdraexp.app.tap import Options
from kdraexp.dra.listing import LIST_ORDER
from kdraexp.kube.kubeconfig import ClusterConfig
from kdraexp.serve.authfilter import Protected
from kdraexp.serve.site import BoundedSite
from kdraexp.store.sharding import Shard
from kdraexp.telemetry.selfmetrics import CollectionStats
from kdraexp.util.reactor import IKdraReactor


def parse(*args: str) -> Options:
    options = Options()
    options.parseOptions(list(args))
    return options


def test_defaults() -> None:
    """Every address on 8080 and 8081, 10 s, 500 a page, the cluster."""
    assert parse().settings == Settings()
    assert (Settings().listen, Settings().telemetry_listen) == (":8080", ":8081")


def test_values() -> None:
    """Every option is read."""
    options = parse(
        "--listen",
        "tcp:9000:interface=127.0.0.1",
        "--telemetry-listen",
        "127.0.0.1:9001",
        "--timeout",
        "2.5",
        "--page-size",
        "50",
        "--source",
        "file:/x.yaml",
    )
    assert options.settings == Settings(
        listen="tcp:9000:interface=127.0.0.1",
        telemetry_listen="127.0.0.1:9001",
        timeout=2.5,
        page_size=50,
        file="/x.yaml",
    )
    assert parse("--telemetry-listen", "").settings.telemetry_listen == ""
    assert parse("--pod", "kdraexp-2", "--total-shards", "4").settings.shard == Shard(2, 4)
    assert parse("--shard", "1", "--total-shards", "2").settings.shard == Shard(1, 2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--timeout", "0"], "--timeout: expected seconds greater than 0, got '0'"),
        (["--timeout", "inf"], "--timeout: expected seconds greater than 0, got 'inf'"),
        (["--timeout", "soon"], "--timeout: expected seconds greater than 0, got 'soon'"),
        (["--page-size", "0"], "--page-size: expected a whole number of at least 1, got '0'"),
        (["--page-size", "1.5"], "--page-size: expected a whole number of at least 1, got '1.5'"),
        (
            ["--max-response-bytes", "10Ei"],
            "--max-response-bytes: expected bytes from 64Ki to below 8Ei, got '10Ei'",
        ),
        (
            ["--max-response-bytes", "1Ki"],
            "--max-response-bytes: expected bytes from 64Ki to below 8Ei, got '1Ki'",
        ),
        (
            ["--claim-device-data", "a.b,a_b"],
            "--claim-device-data: 'a_b' and 'a.b' both give data_a_b",
        ),
        (["--source", "file:"], "--source 'file:': expected 'cluster' or 'file:PATH'"),
        (["--source", "kube"], "--source 'kube': expected 'cluster' or 'file:PATH'"),
        (
            ["--listen", "bogus:1:2"],
            "--listen 'bogus:1:2': expected a port, :PORT, HOST:PORT (an IPv4 address or a host "
            "name), [IPv6]:PORT or a Twisted endpoint such as tcp:8080:interface=127.0.0.1",
        ),
        (
            ["--listen", "no-such-host.invalid:9382"],
            "--listen 'no-such-host.invalid:9382': the host name 'no-such-host.invalid' does not "
            "resolve (Name or service not known)",
        ),
        (["--listen", "tcp:x"], "--listen 'tcp:x': invalid literal for int() with base 10: 'x'"),
        (["--listen", "70000"], "--listen '70000': the port must be at most 65535"),
        (["--total-shards", "0"], "--total-shards: expected a whole number of at least 1, got '0'"),
        (["--shard", "3", "--total-shards", "3"], "shard 3 of 3: expected 0 <= shard < total"),
        (["--shard", "one", "--total-shards", "3"], "--shard: expected a whole number, got 'one'"),
        (
            ["--shard", "\u0661", "--total-shards", "3"],
            "--shard: expected a whole number, got '\u0661'",
        ),
        (
            ["--total-shards", "1_0"],
            "--total-shards: expected a whole number of at least 1, got '1_0'",
        ),
        (["--pod", "x-\u0661"], "--pod 'x-\u0661': not a StatefulSet pod name (NAME-ORDINAL)"),
        (
            ["--pod", "x" * 100000 + "-1"],
            "--pod: a pod name has at most 253 characters, got 100002",
        ),
        (["--pod", "exporter"], "--pod 'exporter': not a StatefulSet pod name (NAME-ORDINAL)"),
        (["--shard", "1", "--pod", "x-1"], "--shard and --pod are mutually exclusive"),
        (
            ["--telemetry-listen", "localhost"],
            "--telemetry-listen 'localhost': expected a port, :PORT, HOST:PORT (an IPv4 address "
            "or a host name), [IPv6]:PORT or a Twisted endpoint such as "
            "tcp:8080:interface=127.0.0.1",
        ),
        (["--nope"], "option --nope not recognized"),
        (
            ["--resources", "resourceslices,nodes", "--expect-pools", "gpu.nvidia.com=,,,"],
            "--expect-pools 'gpu.nvidia.com=,,,': found ',', expected: !, identifier, or "
            "'end of string'",
        ),
        (
            ["--resources", "resourceslices,nodes", "--expect-pools", "gpu.nvidia.com=cores>1_0"],
            "--expect-pools 'gpu.nvidia.com=cores>1_0': unable to parse requirement: "
            "values[0]: Invalid value: '1_0': for 'Gt', 'Lt' operators, the value must be an "
            "integer",
        ),
        (
            [
                "--resources",
                "resourceslices,nodes",
                "--expect-pools",
                "gpu.nvidia.com=gpu notin (a b)",
            ],
            "--expect-pools 'gpu.nvidia.com=gpu notin (a b)': unable to parse requirement: "
            "found 'b', expected: ',' or ')'",
        ),
        (
            ["--auth-filter", "--source", "file:/x.json"],
            "--auth-filter asks the API server to review tokens: it needs --source cluster",
        ),
        (
            ["--auth-token-audiences", "kdraexp"],
            "--auth-token-audiences is used by --auth-filter alone",
        ),
        (
            ["--listen", ":8081"],
            "--listen ':8081' and --telemetry-listen ':8081' take the same port: "
            "give them different ones",
        ),
        (
            ["--listen", ":9000", "--telemetry-listen", "0.0.0.0:9000"],
            "--listen ':9000' and --telemetry-listen '0.0.0.0:9000' take the same port: "
            "give them different ones",
        ),
        (
            ["--listen", "127.0.0.1:9000", "--telemetry-listen", "localhost:9000"],
            "--listen '127.0.0.1:9000' and --telemetry-listen 'localhost:9000' take the same "
            "port: give them different ones",
        ),
        (
            ["--probe-listen", "127.0.0.1:8081"],
            "--telemetry-listen ':8081' and --probe-listen '127.0.0.1:8081' take the same "
            "port: give them different ones",
        ),
        (
            ["--probe-listen", "nowhere"],
            "--probe-listen 'nowhere': expected a port, :PORT, HOST:PORT (an IPv4 address "
            "or a host name), [IPv6]:PORT or a Twisted endpoint such as "
            "tcp:8080:interface=127.0.0.1",
        ),
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
            ["--resources", "namespaces"],
            "--resources: expected some of deviceclasses, devicetaintrules, "
            "resourceslices, resourceclaims, pods, nodes, got 'namespaces'",
        ),
    ],
)
def test_usage_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad value: exit status 2 and one line saying what is wrong."""
    with pytest.raises(SystemExit) as caught:
        parse(*args)
    assert caught.value.code == 2
    assert capsys.readouterr().err == f"kdraexp: {message} (see kdraexp --help)\n"


def test_tls_config_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --tls-config key kdraexp does not honour ends the start with status 2, one line."""
    issued = trustme.CA().issue_cert("kdraexp.example")
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    issued.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    web = tmp_path / "web.yml"
    web.write_text(
        "tls_server_config: {cert_file: tls.crt, key_file: tls.key}\n"
        "basic_auth_users: {alice: $2y$10$abc}\n"
    )
    with pytest.raises(SystemExit) as caught:
        parse("--tls-config", str(web))
    assert caught.value.code == 2
    assert capsys.readouterr().err == (
        f"kdraexp: --tls-config {web}: basic_auth_users is not supported by kdraexp (use "
        "client certificates or a NetworkPolicy) (see kdraexp --help)\n"
    )
    web.write_text("tls_server_config: {cert_file: tls.crt, key_file: tls.key}\n")
    with pytest.raises(SystemExit):
        parse("--tls-config", str(web), "--listen", "ssl:8443:privateKey=k:certKey=c")
    assert capsys.readouterr().err == (
        "kdraexp: --listen 'ssl:8443:privateKey=k:certKey=c' is TLS already: with --tls-config, "
        "give a plain address (--tls-config serves it over TLS) (see kdraexp --help)\n"
    )
    options = parse("--tls-config", str(web), "--probe-listen", ":8082")
    assert (options.settings.tls_config, options.settings.probe_listen) == (str(web), ":8082")


def test_service_tree(tmp_path: Path) -> None:
    """The client, the gatherer, then the two listeners (last, so they stop first)."""
    memory = MemoryReactorClock()
    reactor = cast(IKdraReactor, memory)
    cluster = ClusterConfig("https://127.0.0.1:6443", "test", token="t")
    settings = Settings(listen="tcp:8080", telemetry_listen="tcp:8081")
    top = build_service(settings, cluster, reactor)
    children = list(top)
    assert isinstance(children[0], KubeClientService)
    assert [type(child) for child in children[-2:]] == [ListeningService, ListeningService]
    top.privilegedStartService()
    top.startService()
    assert [server[:1] for server in memory.tcpServers] == [(8080,), (8081,)]
    assert all(isinstance(server[1], BoundedSite) for server in memory.tcpServers)
    top.stopService()
    without = build_service(attrs.evolve(settings, telemetry_listen=""), cluster, reactor)
    assert sum(isinstance(child, ListeningService) for child in without) == 1


def test_auth_filter_settings() -> None:
    """--auth-filter and its audiences, comma-separated, blanks dropped."""
    settings = parse("--auth-filter", "--auth-token-audiences", " kdraexp, metrics ,").settings
    assert (settings.auth_filter, settings.auth_token_audiences) == (True, ("kdraexp", "metrics"))
    assert not parse().settings.auth_filter


def test_auth_filter_guards_both_listeners() -> None:
    """With --auth-filter each listener serves its routes behind the filter; without, not."""
    cluster = ClusterConfig("https://127.0.0.1:6443", "test", token="t")
    settings = Settings(listen="tcp:8080", telemetry_listen="tcp:8081", auth_filter=True)
    for auth_filter in (True, False):
        memory = MemoryReactorClock()
        top = build_service(
            attrs.evolve(settings, auth_filter=auth_filter), cluster, cast(IKdraReactor, memory)
        )
        top.privilegedStartService()
        sites = [cast(BoundedSite, server[1]) for server in memory.tcpServers]
        assert len(sites) == 2
        assert all(isinstance(site.resource, Protected) == auth_filter for site in sites)
        top.stopService()


def test_file_source_has_no_client() -> None:
    """The offline source needs no cluster and makes no client."""
    top = build_service(Settings(file="/x.yaml"), None, cast(IKdraReactor, MemoryReactorClock()))
    assert not any(isinstance(child, KubeClientService) for child in top)
    assert IService.providedBy(top)


def test_plugin_discovered() -> None:
    """twistd finds the kdraexp plugin, and it is a proper service maker."""
    makers = [p for p in getPlugins(IServiceMaker) if p.tapname == "kdraexp"]
    assert len(makers) == 1
    verifyObject(IServiceMaker, makers[0])
    verifyObject(IPlugin, makers[0])


def test_shard_families_only_when_sharded() -> None:
    """kube_dra_exporter_shard_ordinal and _total_shards describe a sharded exporter only."""
    whole = {family.name for family in CollectionStats(10.0, Shard()).collect()}
    assert not whole & {"kube_dra_exporter_shard_ordinal", "kube_dra_exporter_total_shards"}
    sharded = {family.name: family for family in CollectionStats(10.0, Shard(1, 3)).collect()}
    assert sharded["kube_dra_exporter_shard_ordinal"].samples[0].value == 1
    assert sharded["kube_dra_exporter_total_shards"].samples[0].value == 3


def test_help_names_every_resource() -> None:
    """--help lists every value --resources takes (pods too)."""
    text = " ".join(str(Options()).split())
    described = text[text.index("--resources=") :].split(" --")[0]
    for kind in LIST_ORDER:
        assert kind.plural in described, described


def test_listen_takes_a_host_name() -> None:
    """HOST:PORT takes a name that resolves, as --help says: localhost:9382."""
    options = parse("--listen", "localhost:9382", "--telemetry-listen", "localhost:9383")
    assert (options.settings.listen, options.settings.telemetry_listen) == (
        "localhost:9382",
        "localhost:9383",
    )


SHOWN_OTHERWISE = {
    "shard": "`0`",  # not given: 0, or the ordinal of --pod
    "device-capacities": "every name but `memorySlice<N>`",  # a regular expression, in words
}
"""Defaults the README's options table writes for a reader rather than as the code holds them."""


def _readme_options() -> dict[str, str]:
    """Each option of the README's options table, by its long name, with the default shown."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    table = readme[readme.index("### Options") : readme.index("### List or watch")]
    shown: dict[str, str] = {}
    for line in table.splitlines():
        if not line.startswith("| `--"):
            continue
        names, default = (cell.strip() for cell in line.strip("|").split("|")[:2])
        longs = [name.strip("`") for name in names.split(", ") if name.startswith("`--")]
        defaults = default.split(", ") if len(longs) > 1 and default else [default] * len(longs)
        for name, value in zip(longs, defaults, strict=True):
            shown[name.removeprefix("--")] = value
    return shown


def test_the_readme_options_table_is_the_command_s() -> None:
    """Every option of the command is in the README's table with its default, and no other.

    A default is compared as the option reads it (``64Mi`` is the bytes the code holds).
    """
    shown = _readme_options()
    options = Options()
    rows = cast(list[list[Any]], options.optParameters)
    taken = {row[0]: row for row in rows}
    flags = {
        name.removeprefix("opt_").replace("_", "-")
        for name in dir(options)
        if name.startswith("opt_")
    } | {row[0] for row in options.optFlags}
    assert set(shown) == set(taken) | flags - {"help"}, "the README's table and --help differ"
    for name, row in taken.items():
        default, coerce = row[2], row[4] if len(row) > 4 else str
        written = shown[name]
        if name in SHOWN_OTHERWISE:
            assert written == SHOWN_OTHERWISE[name], name
            continue
        if default in (None, ""):
            assert written == "", f"--{name}: the README shows {written}, it has no default"
            continue
        assert written.startswith("`") and written.endswith("`"), f"--{name}: {written}"
        assert coerce(written.strip("`")) == default, f"--{name}: {written} is not {default!r}"
