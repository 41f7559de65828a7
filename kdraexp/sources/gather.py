"""One collection: the lists under one deadline, shared by concurrent scrapes.

The kinds declared ``first`` (DeviceClasses, DeviceTaintRules) are listed first: slices need the
classes to match devices, claims to price their results.  The others are then listed in
parallel, each page read as it arrives.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from kdraexp.cel.matching import Matcher
from kdraexp.dra.listing import Kind, ListError, Reason, Source
from kdraexp.families import KINDS
from kdraexp.families.selection import Selection
from kdraexp.sources.celidle import IdleEnding
from kdraexp.sources.problemlog import ProblemLog
from kdraexp.sources.protocol import CollectionFailed, Waiting
from kdraexp.store.collection import Collection, CollectionBuilder, Store
from kdraexp.store.sharding import Shard
from kdraexp.telemetry.selfmetrics import CollectionStats
from kdraexp.util.singleflight import SingleFlight
from kdraexp.util.turns import Turns

log = Logger()

IDLE = "between collections"


def listed_first(kind: Kind) -> bool:
    """Whether *kind* is listed (and, watching, synchronised) before the others, which read it."""
    return KINDS[kind].first


class Gatherer:
    """Runs collections; :meth:`gather` joins the one in flight when there is one."""

    def __init__(
        self,
        source: Source,
        clock: IReactorTime,
        timeout: float,
        stats: CollectionStats,
        selection: Selection,
        shard: Shard = Shard(),  # noqa: B008 - frozen
    ) -> None:
        self._source = source
        self._shard = shard
        self._clock = clock
        self._timeout = timeout
        self._stats = stats
        self._selection = selection
        self._matcher = Matcher()
        self._idle = IdleEnding(self._matcher, clock)
        self._store = Store()
        """What the last collection read: unchanged objects keep their rows."""
        self._problems = ProblemLog(stats)
        self._doing = IDLE
        self._stopped = False
        """Whether the exporter is stopping: a list failing then was cut short, not failed."""
        self._flight: SingleFlight[Collection] = SingleFlight(
            lambda: Deferred.fromCoroutine(self._collect())
        )

    def gather(self) -> Deferred[Collection]:
        """A collection: the one in flight, or a new one."""
        return self._flight()

    @property
    def ready(self) -> bool:
        """Whether a scrape can be answered (in list mode, always: it lists)."""
        return True

    @property
    def doing(self) -> str:
        """The phase of the collection in flight, or :data:`IDLE`."""
        return self._doing

    def not_synced(self) -> dict[str, Waiting]:
        """Nothing: a list-mode scrape waits for nothing kept."""
        return {}

    def behind(self) -> dict[str, tuple[float, int]]:
        """Nothing: list mode follows nothing between scrapes."""
        return {}

    def start(self) -> None:
        """Nothing runs between scrapes in list mode but the end of an idle CEL process.

        The process is started when a selector first needs it: never, if every class's reads
        as :mod:`kdraexp.cel.native` evaluates.
        """
        if self._selection.evaluates_selectors:
            self._idle.start()

    @property
    def running(self) -> bool:
        """Whether a collection is in flight."""
        return self._flight.running

    def stop(self) -> None:
        """Cancel the collection in flight (the exporter is stopping); end the CEL process."""
        self._stopped = True
        self._flight.cancel()
        self._idle.stop()
        self._matcher.close()

    async def _collect(self) -> Collection:
        try:
            return await self._phases()
        finally:
            self._doing = IDLE

    async def _phases(self) -> Collection:
        builder = CollectionBuilder(
            self._selection, self._matcher, self._store, self._shard, self._source.limit
        )
        deadline = self._clock.seconds() + self._timeout
        kinds = self._selection.kinds
        first = [kind for kind in kinds if listed_first(kind)]
        errors = await self._lists(first, builder, deadline)
        builder.classes_listed()
        errors += await self._lists([k for k in kinds if not listed_first(k)], builder, deadline)
        if errors:
            raise CollectionFailed(tuple(errors))
        self._doing = "making the families of a collection"
        collection = await builder.finish(Turns(self._clock))
        self._doing = "counting and logging the values a collection could not read"
        await self._report(collection)
        return collection

    async def _lists(
        self, kinds: list[Kind], builder: CollectionBuilder, deadline: float
    ) -> list[ListError]:
        self._doing = "listing and reading " + ", ".join(kind.plural for kind in kinds)
        outcomes: list[tuple[bool, Any]] = await DeferredList(
            [self._list(kind, builder, deadline) for kind in kinds], consumeErrors=True
        )
        errors = []
        for ok, outcome in outcomes:
            if not ok:
                outcome.raiseException()  # cancelled: every other failure became a ListError
            if outcome is not None:
                errors.append(outcome)
        return errors

    def _list(
        self, kind: Kind, builder: CollectionBuilder, deadline: float
    ) -> Deferred[ListError | None]:
        started = self._clock.seconds()

        async def timed() -> None:
            objects = await self._source.fetch(kind, builder.reader(kind))
            self._stats.listed(kind.plural, objects, self._clock.seconds() - started)

        def failed(failure: Failure) -> ListError | Failure:
            if failure.check(CancelledError):
                return failure
            if self._stopped:  # a list the cancel did not reach, cut as the reactor stops
                return Failure(CancelledError())
            error = failure.value if isinstance(failure.value, ListError) else None
            if error is None:
                log.failure("Unexpected failure listing {resource}", failure, resource=kind.plural)
                error = ListError(kind.plural, Reason.INTERNAL, None, "see the exporter's log")
            self._stats.failed(kind.plural, error.reason)
            log.error("Error listing {resource}: {error}", resource=kind.plural, error=str(error))
            # Its traceback's frames hold the collection being read, in a cycle through the
            # failure that only the collector's rare full pass frees: a failed scrape's objects
            # (5 MiB a scrape of 3,000 new claims) would stay for dozens of scrapes.
            failure.cleanFailure()
            return error

        def timed_out(_: object, timeout: float) -> Failure:
            return Failure(
                ListError(
                    kind.plural,
                    Reason.TIMEOUT,
                    None,
                    f"not complete within {self._timeout:g}s",
                    public=True,
                )
            )

        listing: Deferred[None] = Deferred.fromCoroutine(timed())
        listing.addTimeout(max(0.0, deadline - started), self._clock, onTimeoutCancel=timed_out)
        outcome: Deferred[ListError | None] = listing.addCallbacks(lambda _: None, failed)
        return outcome

    async def _report(self, collection: Collection) -> None:
        """Count what could not be read in every object listed; log each problem once."""
        classes = {
            name: (count, collection.class_error_messages[name])
            for name, count in collection.class_errors.items()
        }
        await self._problems.read_in_turns(
            "collection", collection.problems, classes, Turns(self._clock)
        )
