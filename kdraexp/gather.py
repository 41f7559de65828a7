"""One collection: the three lists in parallel under one deadline, shared by concurrent scrapes."""

from __future__ import annotations

from typing import Protocol, cast

import attrs
from twisted.internet.defer import CancelledError, Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from kdraexp.apiclient import ListError
from kdraexp.dra import KINDS, Kind, ListResult
from kdraexp.metrics import Samples
from kdraexp.selfmetrics import ListStats
from kdraexp.singleflight import SingleFlight

log = Logger()


class Source(Protocol):
    """Where the DRA objects come from: the API server, or a file."""

    async def fetch(self, kind: Kind) -> ListResult:
        """Every object of *kind* reduced to samples; raises ListError."""


@attrs.frozen
class CollectionFailed(Exception):
    """At least one list failed: the scrape must carry no samples."""

    errors: tuple[ListError, ...]


class Gatherer:
    """Runs collections; :meth:`collect` joins the one in flight when there is one."""

    def __init__(
        self, source: Source, clock: IReactorTime, timeout: float, stats: ListStats
    ) -> None:
        self._source = source
        self._clock = clock
        self._timeout = timeout
        self._stats = stats
        self._problems: frozenset[str] = frozenset()
        self.collect: SingleFlight[Samples] = SingleFlight(
            lambda: Deferred.fromCoroutine(self._collect())
        )

    async def _collect(self) -> Samples:
        outcomes = await DeferredList([self._list(kind) for kind in KINDS], consumeErrors=True)
        samples = Samples()
        errors: list[ListError] = []
        problems: set[str] = set()
        for kind, (ok, value) in zip(KINDS, cast(list[tuple[bool, object]], outcomes), strict=True):
            if ok:
                assert isinstance(value, ListResult)
                samples.update(value.samples)
                problems.update(value.problems)
                continue
            assert isinstance(value, Failure)
            if value.check(CancelledError):
                value.raiseException()
            error = value.value if isinstance(value.value, ListError) else None
            if error is None:
                log.failure("Unexpected failure listing {resource}", value, resource=kind.plural)
                error = ListError(kind.plural, "InternalError", None, "see the exporter's log")
            self._stats.failed(kind.plural, error.reason)
            log.error("Error listing {resource}: {error}", resource=kind.plural, error=str(error))
            errors.append(error)
        for problem in sorted(problems - self._problems):
            log.warn("{problem} (logged once while it lasts)", problem=problem)
        self._problems = frozenset(problems)
        if errors:
            raise CollectionFailed(tuple(errors))
        return samples

    def _list(self, kind: Kind) -> Deferred[ListResult]:
        started = self._clock.seconds()

        async def timed() -> ListResult:
            result = await self._source.fetch(kind)
            self._stats.listed(kind.plural, result.objects, self._clock.seconds() - started)
            return result

        def timed_out(_: object, timeout: float) -> Failure:
            return Failure(
                ListError(kind.plural, "Timeout", None, f"not complete within {timeout:g}s", True)
            )

        listing = Deferred.fromCoroutine(timed())
        listing.addTimeout(self._timeout, self._clock, onTimeoutCancel=timed_out)
        return listing
