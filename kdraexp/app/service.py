"""The service tree: configuration -> API client -> gatherer -> web -> listening endpoint."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

import attrs
from twisted.application.service import IServiceCollection, MultiService, Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import ILogObserver, Logger
from twisted.python.components import Componentized
from twisted.python.failure import Failure
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.resource import IResource

from kdraexp import __version__
from kdraexp.app import logs
from kdraexp.app.reaper import PERIOD, OrphanReaper
from kdraexp.dra.listing import DEFAULT_MAX_RESPONSE_BYTES, Source, Watcher
from kdraexp.families.selection import Selection, select
from kdraexp.kube.client import KubeListClient
from kdraexp.kube.credentials import Credentials
from kdraexp.kube.kubeconfig import ClusterConfig, redacted
from kdraexp.kube.reviews import ReviewClient
from kdraexp.kube.tls import KubeTLSPolicy, trust_root
from kdraexp.kube.transport import EndpointFactory, Limits
from kdraexp.serve import listen
from kdraexp.serve.authfilter import AuthFilter
from kdraexp.serve.probes import ProbeApp
from kdraexp.serve.site import BoundedSite
from kdraexp.serve.tlscontext import ServingTLS
from kdraexp.serve.web import HANDLERS, ExporterApp, TelemetryApp
from kdraexp.sources.file import FileSource
from kdraexp.sources.gather import Gatherer
from kdraexp.sources.protocol import CollectionSource
from kdraexp.sources.watch import WatchGatherer
from kdraexp.store.sharding import Shard
from kdraexp.telemetry.authfilter import AuthFilterStats
from kdraexp.telemetry.http import HTTPStats
from kdraexp.telemetry.memorylimit import MemoryWatch
from kdraexp.telemetry.reactorturns import TurnWatch
from kdraexp.telemetry.selfmetrics import CollectionStats, registry
from kdraexp.telemetry.tlsstats import TLSStats
from kdraexp.telemetry.watchstats import WatchStats
from kdraexp.util.cgroup import MemoryCgroup
from kdraexp.util.reactor import IKdraReactor

log = Logger()

MAX_CONNECTIONS = 4
"""Kept-alive connections to the API server: the three lists run in parallel."""


@attrs.frozen
class Settings:
    """What the command line chose."""

    listen: str = ":8080"
    telemetry_listen: str = ":8081"
    """Where the exporter's own metrics are served; empty for nowhere."""
    timeout: float = 10.0
    page_size: int = 500
    file: str | None = None
    """The offline source's path; None reads the cluster."""
    selection: Selection = attrs.Factory(select)
    """The resources listed and the families written."""
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    shard: Shard = attrs.Factory(Shard)
    """The part of the cluster this exporter writes (all of it by default)."""
    mode: str = "list"
    """``list``: every scrape lists; ``watch``: lists once, then follows the changes."""
    max_staleness: float = 300.0
    """In watch mode, seconds a failing watch's last state may still be served."""
    log_level: str = "info"
    log_format: str = "text"
    auth_filter: bool = False
    """Every route but the probes behind a TokenReview and a SubjectAccessReview."""
    auth_token_audiences: tuple[str, ...] = ()
    auth_allowed_ttl: float = 300.0
    """Seconds an allowing SubjectAccessReview is kept: a removed binding's delay."""
    tls_config: str | None = None
    """The web configuration file both listeners serve TLS as; None serves plain HTTP."""
    probe_listen: str = ""
    """Where /healthz and /readyz alone are served in plain HTTP; empty for nowhere."""


class KubeClientService(Service):
    """Owns the process's one connection pool to the API server and closes it on stop."""

    def __init__(
        self,
        cluster: ClusterConfig,
        reactor: IKdraReactor,
        page_size: int,
        limits: Limits = Limits(),  # noqa: B008 - frozen
        audiences: tuple[str, ...] = (),
    ) -> None:
        self.pool = HTTPConnectionPool(reactor, persistent=True)
        self.pool.maxPersistentPerHost = MAX_CONNECTIONS
        credentials = Credentials(
            cluster, reactor, forget_connections=self.pool.closeCachedConnections
        )
        policy = KubeTLSPolicy(
            trust_root(None if cluster.insecure else cluster.ca_pem),
            cluster.tls_server_name,
            cluster.insecure,
            credentials.client_certificate,
        )
        endpoints = EndpointFactory(reactor, policy, limits)
        agent = Agent.usingEndpointFactory(reactor, endpoints, pool=self.pool)
        self.client = KubeListClient(
            agent,
            cluster.server,
            credentials,
            page_size,
            limits,
            cluster.tls_server_name,
            clock=reactor,
        )
        self.reviews = ReviewClient(
            agent, cluster.server, credentials, audiences, cluster.tls_server_name
        )

    def stopService(self) -> Deferred[None]:
        """Drop the kept-alive connections."""
        super().stopService()
        closed: Deferred[None] = self.pool.closeCachedConnections()
        return closed


class SourceService(Service):
    """Starts the source with the exporter (watches synchronise), and stops it with it.

    Started, it makes the first collection at once (:meth:`ExporterApp.warm`).
    """

    def __init__(self, source: CollectionSource, exporter: ExporterApp, timeout: float) -> None:
        self.source = source
        self.exporter = exporter
        self.timeout = timeout

    def startService(self) -> None:
        """Start the source; collect and render once."""
        super().startService()
        self.source.start()
        self.exporter.warm(self.timeout)

    def stopService(self) -> None:
        """Cancel what is in flight: lists, watches."""
        super().stopService()
        self.source.stop()


@attrs.define(eq=False, slots=False)
class ListeningService(Service):
    """Listens on one endpoint; a port that cannot be bound ends the process with one log line.

    It binds in ``privilegedStartService`` (so that failure to bind is reported at startup, and
    before twistd would drop privileges), says "serving" with the address bound, and stops
    listening when the service stops.
    """

    what: str
    description: str
    endpoint: IStreamServerEndpoint
    factory: IProtocolFactory
    _listening: Deferred[IListeningPort | None] | None = attrs.field(default=None, init=False)

    def privilegedStartService(self) -> None:
        """Bind now; exit with status 1 if the port cannot be bound."""
        super().privilegedStartService()
        refused: list[Failure] = []

        def failed(failure: Failure) -> None:
            refused.append(failure)
            log.critical(
                "Failed to start the {what} listener on {listen}: {error}",
                what=self.what,
                listen=self.description,
                error=str(failure.value),
            )

        self._listening = self.endpoint.listen(self.factory).addCallbacks(self._bound, failed)
        if refused:  # every endpoint the exporter makes binds at once
            raise SystemExit(1)

    def startService(self) -> None:
        """Bind, unless privilegedStartService did."""
        super().startService()
        if self._listening is None:
            self.privilegedStartService()

    def stopService(self) -> Deferred[None]:
        """Stop listening (and stop waiting for a port still being bound)."""
        super().stopService()
        listening, self._listening = self._listening, None
        if listening is None:
            return succeed(None)
        listening.cancel()

        def stop(port: IListeningPort | None) -> Deferred[None] | None:
            return None if port is None else port.stopListening()

        stopped: Deferred[None] = listening.addCallback(stop)
        return stopped

    def _bound(self, port: IListeningPort) -> IListeningPort:
        site = getattr(self.factory, "wrappedFactory", self.factory)  # under TLS, the site's
        if isinstance(site, BoundedSite):
            site.listening(port)
        host: Any = port.getHost()
        address = getattr(host, "host", None)
        if address is None:
            where = str(host)  # a UNIX socket
        elif ":" in address:
            where = f"[{address}]:{host.port}"
        else:
            where = f"{address}:{host.port}"
        log.info(
            "Serving {what} on {listen} ({where})",
            what=self.what,
            listen=self.description,
            where=where,
        )
        return port


class FrozenStartup(Service):
    """Leaves what startup made (modules, classes, configuration) out of later collector passes.

    ``gc.freeze`` moves every object alive now to a permanent generation: a collection allocates
    hundreds of thousands of rows, and each full collector pass would otherwise walk the whole
    program too (measured: a fifth of a 16,000-device collection's time).
    """

    def startService(self) -> None:
        """Freeze once everything is wired."""
        super().startService()
        gc.collect()
        gc.freeze()


class WatchService(Service):
    """Runs a watch of the exporter itself (its reactor's turns, its memory) while it runs."""

    def __init__(self, watch: TurnWatch | MemoryWatch) -> None:
        self.watch = watch

    def startService(self) -> None:
        """Begin measuring."""
        super().startService()
        self.watch.start()

    def stopService(self) -> None:
        """Stop measuring."""
        self.watch.stop()
        super().stopService()


class ExporterService(MultiService):
    """The whole exporter, which says when it stops, and tells twistd how it logs.

    Its children stop in reverse order: the listeners first, then the collection in flight is
    cancelled.
    """

    def __init__(self, observer: ILogObserver) -> None:
        super().__init__()
        self.observer = observer

    def setServiceParent(self, parent: IServiceCollection) -> None:  # noqa: N802 - IService
        """Join *parent*; under twistd, whose application it is, log as ``--log-*`` say.

        twistd logs to its application's ILogObserver component when ``--logger`` names none.
        """
        super().setServiceParent(parent)
        if isinstance(parent, Componentized) and parent.getComponent(ILogObserver) is None:
            parent.setComponent(ILogObserver, self.observer)

    def stopService(self) -> Deferred[None]:
        """Log, then stop every child."""
        log.info("Stopping: closing the listeners, cancelling the lists in flight")
        stopped: Deferred[None] = super().stopService()
        return stopped


def build_service(
    settings: Settings, cluster: ClusterConfig | None, reactor: IKdraReactor
) -> MultiService:
    """Assemble the exporter; *cluster* is None for the offline source."""
    top = ExporterService(logs.observer(settings.log_level, settings.log_format))
    source: Source
    watcher: Watcher | None = None
    client: KubeClientService | None = None
    if settings.file is not None:
        source = FileSource(settings.file, reactor, settings.max_response_bytes)
        origin = f"file {settings.file}"
    else:
        assert cluster is not None
        limits = Limits(body=settings.max_response_bytes)
        client = KubeClientService(
            cluster, reactor, settings.page_size, limits, settings.auth_token_audiences
        )
        client.setServiceParent(top)
        source = watcher = client.client
        origin = f"{redacted(cluster.server)} ({cluster.origin})"
        for warning in cluster.warnings:
            log.warn("{warning}", warning=warning)
    for warning in settings.selection.warnings:
        log.warn("{warning}", warning=warning)
    stats = CollectionStats(settings.timeout, settings.shard)
    http_stats = HTTPStats()
    collectors: list[Any] = [stats, http_stats]
    tls: ServingTLS | None = None
    if settings.tls_config is not None:
        tls_stats = TLSStats()
        collectors.append(tls_stats)
        tls = ServingTLS(settings.tls_config, reactor, tls_stats)
        tls.setServiceParent(top)
    gatherer = _gatherer(settings, source, watcher, reactor, stats, collectors)
    exporter = ExporterApp(gatherer, reactor, settings.telemetry_listen)
    SourceService(gatherer, exporter, settings.timeout).setServiceParent(top)
    turns = TurnWatch(reactor, lambda: gatherer.doing)
    collectors.append(turns)
    WatchService(turns).setServiceParent(top)
    memory = MemoryWatch(reactor, MemoryCgroup.find())
    collectors.append(memory)
    WatchService(memory).setServiceParent(top)
    if os.getpid() == 1:
        log.info("Running as PID 1: reaping orphaned processes every {period:g}s", period=PERIOD)
        OrphanReaper().setServiceParent(top)
    FrozenStartup().setServiceParent(top)
    log.info(
        "Starting kdraexp {version}, reading {origin} ({mode} mode)",
        version=__version__,
        origin=origin,
        mode=settings.mode,
    )
    if not settings.shard.whole:
        log.info(
            "Writing shard {index} of {total}",
            index=settings.shard.index,
            total=settings.shard.total,
        )
    protect = _protection(settings, client, reactor, collectors)
    listeners = [
        ("metrics", "main", settings.listen, protect(exporter.app.resource(), "main"), tls)
    ]
    if settings.telemetry_listen:
        telemetry = protect(TelemetryApp(registry(*collectors)).app.resource(), "telemetry")
        listeners.append(("telemetry", "telemetry", settings.telemetry_listen, telemetry, tls))
    if settings.probe_listen:  # plain HTTP, the probes alone, for a kubelet with no certificate
        probes = ProbeApp(exporter).app.resource()
        listeners.append(("probes", "probe", settings.probe_listen, probes, None))
    for name, label, where, resource, over in listeners:
        site = BoundedSite(resource, label, http_stats, HANDLERS, reactor)
        endpoint = listen.endpoint(reactor, where)
        ListeningService(name, where, endpoint, _over(site, over, reactor)).setServiceParent(top)
    return top


def _gatherer(
    settings: Settings,
    source: Source,
    watcher: Watcher | None,
    reactor: IKdraReactor,
    stats: CollectionStats,
    collectors: list[Any],
) -> CollectionSource:
    """What makes the collections: a watch of every resource, or lists at each scrape."""
    if settings.mode == "watch" and watcher is not None:  # the options refuse watch with a file
        watch_stats = WatchStats(
            stats, (kind.plural for kind in settings.selection.kinds), settings.max_staleness
        )
        collectors.append(watch_stats)
        return WatchGatherer(
            watcher,
            reactor,
            watch_stats,
            settings.selection,
            settings.max_staleness,
            settings.shard,
        )
    return Gatherer(source, reactor, settings.timeout, stats, settings.selection, settings.shard)


def _protection(
    settings: Settings,
    client: KubeClientService | None,
    reactor: IKdraReactor,
    collectors: list[Any],
) -> Callable[[IResource, str], IResource]:
    """How a listener's routes are served: behind the auth filter with --auth-filter."""
    if not settings.auth_filter:
        return lambda resource, listener: resource
    assert client is not None  # the options refuse --auth-filter with a file
    stats = AuthFilterStats()
    collectors.append(stats)
    log.info("Auth filter on: every route but the probes asks for an allowed bearer token")
    return AuthFilter(client.reviews, reactor, stats, allowed_ttl=settings.auth_allowed_ttl).protect


def _over(site: BoundedSite, tls: ServingTLS | None, reactor: IKdraReactor) -> IProtocolFactory:
    """*site* served over *tls* (with its headers), or as it is without."""
    if tls is None:
        return site
    site.headers = tls.headers
    return tls.wrap(site, reactor)
