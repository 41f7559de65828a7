"""Watch mode: each resource listed once, then followed; a scrape lists nothing.

Each kind is synchronised by a streaming list where the server offers one (a watch with
``sendInitialEvents``, complete at the bookmark annotated ``k8s.io/initial-events-end``), else
by a paged list, and then followed by a watch from the resourceVersion reached.  Bookmarks keep
that version fresh; a watch the server closes (its ``timeoutSeconds``) is opened again from it;
a 410 (the version was compacted away) lists the kind again.  Two endings are failures, as
client-go has them: a watch ended within :data:`SHORT` with nothing sent (a proxy closing long
requests), and a watch silent for :data:`IDLE` seconds, not even a bookmark (a stall).  Each
event updates the object's entry at once (its rows, its facts); a scrape only puts the current
entries together, and families whose lists did not change keep their rendered text.

The kinds declared ``first`` (DeviceClasses, DeviceTaintRules) are synchronised first: devices
are matched with the classes.  When a class changes, the kept ResourceSlices (each kept
deflated) are read again with the new classes: no list is made again.
A resource not synchronised yet makes scrapes answer 503; one whose watch has failed for longer
than ``--max-staleness`` makes them fail as a failed list does: no data older than that bound is
served.  A failure's time is that of the last event or bookmark applied, not of the error: a
watch that stalled for :data:`IDLE` seconds has been stale that long.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

import msgspec
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from kdraexp.cel.matching import Matcher
from kdraexp.dra import wire
from kdraexp.dra.listing import (
    Kind,
    ListError,
    Reason,
    ShapeError,
    StatusReason,
    Watcher,
)
from kdraexp.families import KINDS
from kdraexp.families.selection import Selection
from kdraexp.sources.celidle import IdleEnding
from kdraexp.sources.gather import listed_first
from kdraexp.sources.problemlog import ProblemLog, classes_of
from kdraexp.sources.protocol import CollectionFailed, NotSynced, Waiting
from kdraexp.store.collection import Collection, CollectionBuilder, Store
from kdraexp.store.reader import KindReader
from kdraexp.store.sharding import Shard
from kdraexp.telemetry.watchstats import WatchStats
from kdraexp.util.lane import Lane
from kdraexp.util.singleflight import SingleFlight
from kdraexp.util.surrogates import Mended, unmended
from kdraexp.util.text import printable
from kdraexp.util.turns import Turns

log = Logger()

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
WATCH_SECONDS = (300, 360)
"""The ``timeoutSeconds`` asked of the server, chosen in this range for each watch (so that the
exporter's watches do not all end at once)."""
IDLE = 150.0
"""Seconds a watch may deliver nothing, not even a bookmark (the server sends one a minute),
before it is restarted."""
SHORT = 1.0
"""Seconds within which a watch that ends having sent nothing failed (client-go's rule)."""
BACKOFF = (1.0, 30.0)
"""Seconds waited after a failure: the first, then doubling up to the last."""
BEHIND = 64 * 2**20
"""Bytes of events waiting to be applied, at most: past them the events waiting are dropped and
the watch resumed from the last one applied (the server sends the rest again), so a lane that
cannot keep up fails visibly instead of falling further behind in memory."""
REFUSALS = 3
"""Watches from one resourceVersion the server refuses in a row before the kind is listed
again: a version it will never accept (a bookmark gone bad) must not be retried forever."""
_BOOKMARK = msgspec.json.Decoder(wire.Bookmark)


class KindWatch:
    """Keeps one kind's reader current."""

    def __init__(
        self,
        kind: Kind,
        client: Watcher,
        reader: KindReader,
        clock: IReactorTime,
        stats: WatchStats,
        changed: Callable[[Kind], None],
        problems: ProblemLog,
    ) -> None:
        self.kind = kind
        self._client = client
        self._reader = reader
        self._clock = clock
        self._stats = stats
        self._problems = problems
        """Where what the objects applied could not give is counted and logged, as a list does."""
        self._changed = changed
        """Called after each event that changed the reader."""
        self.synced = False
        """The reader holds a complete and current state (not being listed again)."""
        self.ever_synced = False
        self.failing_since: float | None = None
        self.error: ListError | None = None
        self._version: str | None = None
        self._streaming = True
        """Whether to try a streaming list (until the server refuses one)."""
        self._resync: str | None = "start"
        """Why the kind must be listed again (None: it need not)."""
        self._running: Deferred[None] | None = None
        self._sync_started = 0.0
        self._watching: Deferred[None] | None = None
        self._idle: IDelayedCall | None = None
        self._heard = False
        """Whether the watch under way has sent anything (an event, a bookmark)."""
        self._dropping = False
        """Whether the watch under way fell too far behind: its events are dropped."""
        self._confirmed = clock.seconds()
        """When an event or bookmark was last applied: the state was current then."""
        self._refusals: tuple[str | None, int] = (None, 0)
        """The version watches were last refused from, and how many times in a row."""
        self.lane = Lane(clock, lambda: reader.costly, self._broke)
        """Every change to the reader, in order: in a thread while reading is costly."""
        self._broken: Exception | None = None
        """What applying an event in the lane raised: the watch ends with it."""

    def start(self) -> None:
        """Start following (until :meth:`stop`)."""
        self._running = Deferred.fromCoroutine(self._run())

    @property
    def started(self) -> bool:
        """Whether the kind is being followed (the rest start once the first are synchronised)."""
        return self._running is not None

    def stop(self) -> None:
        """Stop following; the watch in flight is dropped, and the events not applied yet."""
        self.lane.clear()
        running, self._running = self._running, None
        if running is not None:
            running.cancel()

    def stale_for(self, now: float) -> float:
        """Seconds this kind has been failing (0 while it is current)."""
        return 0.0 if self.failing_since is None else now - self.failing_since

    async def _run(self) -> None:
        backoff = BACKOFF[0]
        while True:
            idle = False
            try:
                if self._resync is not None:
                    await self._sync(self._resync)
                opened = self._clock.seconds()
                await self._follow()
                if not self._heard and self._clock.seconds() - opened < SHORT:
                    raise ListError(
                        self.kind.plural,
                        Reason.TRANSPORT,
                        None,
                        "the watch ended at once, having sent nothing (a proxy or load "
                        "balancer closing long requests?)",
                        verb="watch",
                    )
                backoff = BACKOFF[0]
                continue
            except CancelledError:
                if self._running is None:
                    return  # stopped
                broken, self._broken = self._broken, None
                if broken is None:  # idle: a stalled stream, or a server that forgot it
                    idle = True
                    broken = ListError(
                        self.kind.plural,
                        Reason.TIMEOUT,
                        None,
                        f"the watch sent nothing, not even a bookmark, for {IDLE:g}s",
                        verb="watch",
                    )
                raised: Exception = broken  # or an event the lane could not apply
            except (ListError, ShapeError) as caught:
                raised = caught
            self._broken = None
            # Without its traceback: its frames hold what the failed list read (a refused
            # 58 MB page), kept with the error until the watch is current again.
            failure = _as_list_error(self.kind, raised).with_traceback(None)
            del raised
            expired = failure.code == 410 or failure.reason in (
                StatusReason.EXPIRED,
                StatusReason.GONE,
            )
            if idle or (self._resync is None and not expired):
                # Opened again: gone silent, or interrupted while following (a connection
                # dropped mid-stream, an error, events it could not apply).  Not a 410:
                # that one is listed again.
                self._stats.restarted(self.kind.plural)
            if expired and self._resync is None:
                self._resync = "expired"  # compacted while following: list again at once
                continue
            if self._resync is None and failure.code is not None and self._refused():
                self._resync = "refused"  # the version itself is what the server refuses
            self._failed(failure)  # a 410 while listing again too: back off, as client-go
            await deferLater(self._clock, backoff, lambda: None)
            backoff = min(backoff * 2, BACKOFF[1])

    def _refused(self) -> bool:
        """Count a refusal of the watch's version; whether it is refused too often now."""
        version, count = self._refusals
        count = count + 1 if version == self._version else 1
        self._refusals = (self._version, count)
        return count >= REFUSALS

    async def _sync(self, cause: str) -> None:
        if cause != "start":
            self._stats.relisted(self.kind.plural, cause)
        self.synced = False
        self._sync_started = self._clock.seconds()
        self._stats.resyncing(self.kind.plural)
        await self._restart_reader()
        if self._streaming:
            try:
                await self._stream_initial()
            except ListError as error:
                if error.code not in (400, 403, 422) or error.reason == StatusReason.FORBIDDEN:
                    raise
                log.info(
                    "The API server offers no streaming list of {resource} ({error}): "
                    "listing, then watching",
                    resource=self.kind.plural,
                    error=str(error),
                )
                self._streaming = False
                await self._restart_reader()
        if not self._streaming:
            async with Lane.holding([self.lane]):  # the pages are read here, not in the lane
                await self._client.fetch(self.kind, self._reader)
            self._version = self._client.list_versions.get(self.kind.plural)
            self._synced()

    async def _restart_reader(self) -> None:
        """Listing again: the events of the old stream not applied yet are dropped."""
        self.lane.clear()
        async with Lane.holding([self.lane]):
            self._reader.resync()

    def reread(self) -> None:
        """Read every kept object again, with the classes now configured, one at a time."""

        def each() -> None:
            for key in list(self._reader.entries):
                self.lane.run(
                    functools.partial(self._reader.reread, key),
                    functools.partial(self._read, key),
                )

        self.lane.run(None, each)

    async def _stream_initial(self) -> None:
        done = False

        def event(kind: str, raw: msgspec.Raw | Mended) -> None:
            nonlocal done
            if kind == "BOOKMARK":
                meta = _BOOKMARK.decode(unmended(raw)[0]).metadata
                annotations = (meta.annotations if meta else None) or {}
                ends = annotations.get(INITIAL_EVENTS_END) == "true"
                if not ends and self._behind(meta):
                    return
                self._alive()
                done = done or ends
                self._bookmark(meta, ends)
                return
            self._alive()
            if done:
                self._apply(kind, raw)
            else:
                self._initial(kind, raw)

        await self._watch(event, initial=True)
        if not done:
            raise ListError(
                self.kind.plural,
                Reason.TRANSPORT,
                None,
                "the streaming list ended before all objects were sent",
            )

    async def _follow(self) -> None:
        def event(kind: str, raw: msgspec.Raw | Mended) -> None:
            meta = wire.IDENTITY.decode(unmended(raw)[0]).metadata if kind == "BOOKMARK" else None
            if kind == "BOOKMARK" and self._behind(meta):
                return
            self._alive()
            self._heard = True
            if self._dropping:
                return  # not even a bookmark: it would move the version past what was dropped
            if kind == "BOOKMARK":
                self._bookmark(meta, False)
                return
            self._apply(kind, raw)

        await self._watch(event, initial=False)

    async def _watch(self, event: Any, initial: bool) -> None:
        timeout = random.randint(*WATCH_SECONDS)  # jitter, not secrecy
        log.debug(
            "Watching {resource} from {version} ({how})",
            resource=self.kind.plural,
            version=self._version or "now",
            how="a streaming list" if initial else "changes",
        )
        self._alive()
        self._heard = self._dropping = False
        broken, self._broken = self._broken, None
        if broken is not None:
            raise _as_list_error(self.kind, broken)  # an event applied since the last watch
        try:
            self._watching = Deferred.fromCoroutine(
                self._client.watch(
                    self.kind,
                    self._version,
                    event,
                    initial=initial,
                    timeout_seconds=timeout,
                )
            )
            await self._watching
        finally:
            self._watching = None
            if self._idle is not None and self._idle.active():
                self._idle.cancel()
            self._idle = None

    def _restart_watch(self) -> None:
        if self._watching is not None:
            self._watching.cancel()

    def _alive(self) -> None:
        """Something arrived (or a watch opens): the watch is not idle."""
        if self._idle is not None and self._idle.active():
            self._idle.reset(IDLE)
        else:
            self._idle = self._clock.callLater(IDLE, self._restart_watch)

    def _broke(self, error: Exception) -> None:
        """Applying an event in the lane raised: the watch ends with that error."""
        self._broken = error
        self._restart_watch()

    def _behind(self, meta: Any) -> bool:
        """Whether a bookmark says nothing current: older than the version applied, or no version.

        Versions are compared as the numbers kube-apiserver makes them (etcd revisions).  A
        bookmark whose version is not one (none, or not a number) is none the API server sends
        or would accept a watch from: it proves nothing and is ignored.  Something replaying old
        bookmarks, or sending made-up ones, kept the state served as current for ever, though
        nothing newer came.
        """
        version = meta.resource_version if meta else None
        known = self._version
        if version and _number(version):
            if not (known and _number(known)) or int(version) >= int(known):
                return False
            why = f"older than {known}"
        else:
            why = "not a version the API server makes"
        log.debug(
            "Ignoring a bookmark of {resource} at {version}: {why}",
            resource=self.kind.plural,
            version=printable(version or "", 64),
            why=why,
        )
        return True

    def _bookmark(self, meta: Any, ends_initial: bool) -> None:
        version = meta.resource_version if meta else None

        def then() -> None:
            self._version = version or self._version
            self._current()
            if ends_initial:
                self._synced()

        self.lane.run(None, then)

    def _initial(self, kind: str, raw: msgspec.Raw | Mended) -> None:
        arrived = self._clock.seconds()

        def read() -> None:
            self._reader.response()  # each object of a streaming list stands alone
            self._reader.page([raw])

        self.lane.run(read, lambda: self._stats.event(self.kind.plural, kind, arrived))

    def behind(self) -> tuple[float, int]:
        """Seconds the oldest event not applied yet has waited, and how many wait."""
        return self.lane.behind()

    def _apply(self, kind: str, raw: msgspec.Raw | Mended) -> None:
        if kind not in ("ADDED", "MODIFIED", "DELETED") or self._dropping:
            return
        if self.lane.weight + len(raw) > BEHIND:
            self._dropping = True  # the rest of this watch too: it is resumed from what applied
            seconds, waiting = self.lane.behind()
            self.lane.clear()
            self._broke(
                ListError(
                    self.kind.plural,
                    Reason.TIMEOUT,
                    None,
                    f"applying its events fell {seconds:.0f}s behind ({waiting} events, more "
                    f"than {BEHIND // 2**20} MiB, waiting): resuming from the last one applied",
                    verb="watch",
                )
            )
            return
        arrived = self._clock.seconds()
        applied: list[tuple[str, str | None]] = []

        def then() -> None:
            key, version = applied[0]
            self._version = version or self._version
            self._current()
            self._stats.event(self.kind.plural, kind, arrived)
            self._stats.holding(self.kind.plural, self._held())
            self._read(key)
            if self._reader.changed:
                self._changed(self.kind)

        self.lane.run(lambda: applied.append(self._reader.apply(kind, raw)), then, len(raw))

    def _held(self) -> int:
        """The objects held now (those that give nothing included), as a list counts them."""
        return len(self._reader.entries) + len(self._reader.skipped)

    def _read(self, key: str) -> None:
        """The object *key* was applied (or is gone): count and log its problems."""
        entry = self._reader.entries.get(key)
        source = (self.kind.plural, key)
        if entry is None:
            self._problems.forget(source)
        else:
            self._problems.read(source, entry.problems, classes_of(entry.class_errors))

    def _read_all(self) -> None:
        """Every object was listed: count and log the problems of each, forget the gone."""
        plural = self.kind.plural
        having = {
            key: entry
            for key, entry in self._reader.entries.items()
            if entry.problems or entry.class_errors
        }
        with self._problems.batch():
            for key, entry in having.items():
                self._problems.read((plural, key), entry.problems, classes_of(entry.class_errors))
        for source in self._problems.sources():
            if isinstance(source, tuple) and source[0] == plural and source[1] not in having:
                self._problems.forget(source)

    def _current(self) -> None:
        """An event or bookmark applied: the state is current again, whatever failed before.

        Not when the server merely accepts a watch: one that breaks at its first event, every
        time, must go stale.
        """
        self._refusals = (None, 0)
        self._confirmed = self._clock.seconds()
        if self.failing_since is not None:
            log.info("Watching {resource} again", resource=self.kind.plural)
            self._stats.current(self.kind.plural)
        self.failing_since = None
        self.error = None

    def _synced(self) -> None:
        self._resync = None  # from now on a broken watch resumes from its version
        self.synced = True
        self.ever_synced = True
        self._current()
        took = self._clock.seconds() - self._sync_started
        self._stats.synced(self.kind.plural, self._held(), took)
        self._read_all()
        self._changed(self.kind)

    def _failed(self, error: ListError) -> None:
        if self.failing_since is None:
            # Stale since the state was last known current, not since the error was seen.
            self.failing_since = min(self._confirmed, self._clock.seconds())
            self._stats.failing(self.kind.plural, self.failing_since)
        self.error = error
        self._stats.failed(self.kind.plural, error.reason)
        log.error(
            "Error watching {resource}: {error} (retrying; state served until --max-staleness)",
            resource=self.kind.plural,
            error=str(error),
        )


class WatchGatherer:
    """Collections of what the watches hold, shared by concurrent scrapes."""

    def __init__(
        self,
        client: Watcher,
        clock: IReactorTime,
        stats: WatchStats,
        selection: Selection,
        max_staleness: float,
        shard: Shard = Shard(),  # noqa: B008 - frozen
    ) -> None:
        self._clock = clock
        self._stats = stats
        self._selection = selection
        self._max_staleness = max_staleness
        self._matcher = Matcher()
        self._idle = IdleEnding(self._matcher, clock)
        self._store = Store()
        self._builder = CollectionBuilder(
            selection, self._matcher, self._store, shard, client.limit
        )
        self._watches: dict[str, KindWatch] = {}
        self._problems = ProblemLog(stats.collections)
        self._reported: Collection | None = None
        """The last collection whose cross-object problems were counted."""
        self._rest_started = False
        """Whether the kinds after the first have been started."""
        self._making = False
        """Whether a collection's families are being made."""
        for kind in selection.kinds:
            reader = self._builder.reader(kind, live=True)
            self._watches[kind.plural] = KindWatch(
                kind, client, reader, clock, stats, self._changed, self._problems
            )
        stats.following(self.behind)
        self._flight: SingleFlight[Collection] = SingleFlight(
            lambda: Deferred.fromCoroutine(self._collect())
        )

    @property
    def ready(self) -> bool:
        """Whether every resource has been synchronised once."""
        return all(watch.ever_synced for watch in self._watches.values())

    def behind(self) -> dict[str, tuple[float, int]]:
        """Per resource, how long its oldest event not applied has waited, and how many wait."""
        return {plural: watch.behind() for plural, watch in sorted(self._watches.items())}

    @property
    def doing(self) -> str:
        """Making a collection's families, synchronising some kinds, or applying events."""
        if self._making:
            return "making the families of a collection"
        listing = [plural for plural, watch in self._watches.items() if not watch.synced]
        if listing:
            return "listing and reading " + ", ".join(listing)
        return "applying the watches' events"

    def not_synced(self) -> dict[str, Waiting]:
        """The resources not synchronised yet, with the failure or the step each waits on."""
        first = ", ".join(kind.plural for kind in self._first())
        return {
            plural: watch.error
            or (f"the first list of {plural}" if watch.started else f"{first} first")
            for plural, watch in sorted(self._watches.items())
            if not watch.ever_synced
        }

    def start(self) -> None:
        """Synchronise the classes (and taint rules), then the rest."""
        if self._selection.evaluates_selectors:  # the CEL process starts when first needed
            self._idle.start()
        for kind in self._first():
            self._watches[kind.plural].start()
        if not self._first():
            self._start_rest()

    def stop(self) -> None:
        """Stop every watch."""
        for watch in self._watches.values():
            watch.stop()
        self._flight.cancel()
        self._idle.stop()
        self._matcher.close()

    def gather(self) -> Deferred[Collection]:
        """A collection of the current state (503 until synchronised, 500 past staleness)."""
        return self._flight()

    def _first(self) -> list[Kind]:
        return [kind for kind in self._selection.kinds if listed_first(kind)]

    def _start_rest(self) -> None:
        for kind in self._selection.kinds:
            if not listed_first(kind):
                self._watches[kind.plural].start()

    def _changed(self, kind: Kind) -> None:
        """A watch's reader changed (or synchronised)."""
        if not KINDS[kind].classes:
            if listed_first(kind) and self._first_synced_now():
                self._start_rest()
            return
        if not self._watches[kind.plural].synced:
            return
        classes_changed = Deferred.fromCoroutine(self._classes_changed(self._first_synced_now()))
        classes_changed.addErrback(lambda failure: log.failure("Reading new classes", failure))

    async def _classes_changed(self, first_time: bool) -> None:
        """Configure the kinds read with the classes, once none of them is being read."""
        watches = [w for w in self._watches.values() if KINDS[w.kind].reads_classes]
        async with Lane.holding(w.lane for w in watches):
            changed = self._builder.classes_listed()
        if changed and not first_time:
            for watch in watches:
                watch.reread()  # from the kept objects: no list is made
        if first_time:
            self._start_rest()

    def _first_synced_now(self) -> bool:
        """Whether the first kinds are all synchronised and the rest not started yet."""
        if self._rest_started:
            return False
        if all(self._watches[k.plural].ever_synced for k in self._first()):
            self._rest_started = True
            return True
        return False

    async def _collect(self) -> Collection:
        missing = self.not_synced()
        if missing:
            raise NotSynced(missing)
        now = self._clock.seconds()
        stale = [
            watch.error
            for watch in self._watches.values()
            if watch.error is not None and watch.stale_for(now) > self._max_staleness
        ]
        if stale:
            raise CollectionFailed(tuple(_stale(e, self._max_staleness) for e in stale))
        current = [plural for plural, watch in self._watches.items() if watch.synced]
        # What is applied meanwhile waits for the next scrape.
        async with Lane.holding(w.lane for w in self._watches.values()):
            self._builder.snapshot(current)
            self._making = True
            try:
                collection = await self._builder.collection(Turns(self._clock))
            finally:
                self._making = False
        if collection is not self._reported:  # the cross-object families were made again
            self._reported = collection
            self._problems.read("cluster", collection.cluster_problems, {})
        return collection


def _stale(error: ListError, bound: float) -> ListError:
    return ListError(
        error.resource,
        error.reason,
        error.code,
        f"the watch has failed for more than --max-staleness={bound:g}s",
        public=True,
        verb=error.verb,
    )


def _as_list_error(kind: Kind, raised: Exception) -> ListError:
    if isinstance(raised, ListError):
        return raised
    return ListError(kind.plural, Reason.DECODE, None, str(raised), verb="watch")


def _number(version: str) -> bool:
    """Whether a resourceVersion is a plain decimal number (not too long to compare)."""
    return len(version) <= 40 and version.isascii() and version.isdigit()
