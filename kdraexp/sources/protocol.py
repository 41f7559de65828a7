"""What the HTTP face and the wiring see of a source: one protocol, whatever the source.

The list gatherer (over the API server or a file) and the watch gatherer both provide
:class:`CollectionSource`; a scrape asks it for a collection and reads the two failures below.
"""

from __future__ import annotations

from typing import Protocol

import attrs
from twisted.internet.defer import Deferred

from kdraexp.dra.listing import ListError
from kdraexp.store.collection import Collection


@attrs.frozen
class CollectionFailed(Exception):
    """At least one list failed (or a watch for too long): the scrape must carry no samples."""

    errors: tuple[ListError, ...]


Waiting = ListError | str
"""What a resource not synchronised waits on: the failure that holds it back, or in words."""


class NotSynced(Exception):
    """Some resources have not been synchronised yet: no collection can be complete."""

    def __init__(self, waiting: dict[str, Waiting]) -> None:
        super().__init__(", ".join(waiting))
        self.waiting = waiting
        """Each resource not synchronised, with what it waits on."""


class CollectionSource(Protocol):
    """Where a scrape's collection comes from."""

    @property
    def ready(self) -> bool:
        """Whether a scrape can be answered now (``/readyz``)."""

    @property
    def doing(self) -> str:
        """What the source is doing now, in words (a slow turn of the reactor names it)."""

    def not_synced(self) -> dict[str, Waiting]:
        """The resources a scrape still waits for, with what each waits on (empty when ready)."""

    def behind(self) -> dict[str, tuple[float, int]]:
        """Per resource followed, how long its oldest event not applied has waited, and how many.

        Empty when nothing is followed between scrapes.
        """

    def gather(self) -> Deferred[Collection]:
        """A collection: the one in flight, or a new one.

        :raises CollectionFailed: when a list failed, or a watch has failed for too long.
        :raises NotSynced: while some resource has not been synchronised.
        """

    def start(self) -> None:
        """Begin whatever the source does between scrapes (watches); called once."""

    def stop(self) -> None:
        """Stop: cancel what is in flight."""
