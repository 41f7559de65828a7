"""The watch mode's own metrics: synchronised or not, events, re-lists, restarts, freshness.

A watch's failures are also counted in ``kube_dra_exporter_list_errors_total`` (a watch lists,
then follows), so that one alert covers both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kdraexp.telemetry.selfmetrics import CollectionStats


class WatchStats(Collector):
    """Per resource: synchronised, events by type, re-lists by cause, restarts, last event."""

    def __init__(
        self, collections: CollectionStats, resources: Iterable[str], max_staleness: float
    ) -> None:
        self._collections = collections
        self._max_staleness = max_staleness
        self._failing_since: dict[str, float] = {}
        self._synced = dict.fromkeys(resources, False)
        """Every resource followed, from the start: one not synchronised yet is a 0, not absent."""
        self._events: dict[tuple[str, str], int] = {}
        self._relists: dict[tuple[str, str], int] = {}
        self._restarts: dict[str, int] = {}
        self._last_event: dict[str, float] = {}
        self._behind: Callable[[], Mapping[str, tuple[float, int]]] = dict
        """Per resource, seconds its oldest event not applied has waited, and how many wait."""

    def following(self, behind: Callable[[], Mapping[str, tuple[float, int]]]) -> None:
        """Read how far behind applying each resource's events is from *behind*."""
        self._behind = behind

    def synced(self, resource: str, objects: int, seconds: float) -> None:
        """The resource was synchronised: *objects* read in *seconds*."""
        self._synced[resource] = True
        self._collections.listed(resource, objects, seconds)

    @property
    def collections(self) -> CollectionStats:
        """The statistics both modes write (lists, values not read)."""
        return self._collections

    def holding(self, resource: str, objects: int) -> None:
        """An event was applied: the resource's objects held now."""
        self._collections.holding(resource, objects)

    def resyncing(self, resource: str) -> None:
        """The resource is being listed again."""
        self._synced[resource] = False

    def event(self, resource: str, kind: str, at: float) -> None:
        """An event of *kind* (ADDED, MODIFIED, DELETED) arrived at *at*."""
        key = (resource, kind)
        self._events[key] = self._events.get(key, 0) + 1
        self._last_event[resource] = at

    def relisted(self, resource: str, cause: str) -> None:
        """The resource is listed again (``expired``: a 410; ``classes``: the classes changed)."""
        key = (resource, cause)
        self._relists[key] = self._relists.get(key, 0) + 1

    def restarted(self, resource: str) -> None:
        """A watch was opened again (it went idle, or was interrupted: dropped, broken)."""
        self._restarts[resource] = self._restarts.get(resource, 0) + 1

    def failed(self, resource: str, reason: str) -> None:
        """A watch or its list failed."""
        self._synced.setdefault(resource, False)
        self._collections.failed(resource, reason)

    def failing(self, resource: str, since: float) -> None:
        """The resource's state has not been confirmed current since *since* (Unix time)."""
        self._failing_since[resource] = since

    def current(self, resource: str) -> None:
        """The resource is followed again: what is served is current."""
        self._failing_since.pop(resource, None)

    def collect(self) -> Iterator[Metric]:
        """The families."""
        synced = _labelled(
            GaugeMetricFamily,
            "kube_dra_exporter_watch_synced",
            "1 once the resource has been synchronised and is followed, else 0.",
            {resource: 1.0 if value else 0.0 for resource, value in self._synced.items()},
        )
        events = _labelled(
            CounterMetricFamily,
            "kube_dra_exporter_watch_events",
            "Watch events received, by resource and type.",
            self._events,
            "type",
        )
        relists = _labelled(
            CounterMetricFamily,
            "kube_dra_exporter_watch_relists",
            "Times a resource was listed again, by cause (expired: a 410; classes: new classes).",
            self._relists,
            "cause",
        )
        restarts = _labelled(
            CounterMetricFamily,
            "kube_dra_exporter_watch_restarts",
            "Watches opened again after going idle or being interrupted.",
            self._restarts,
        )
        last = _labelled(
            GaugeMetricFamily,
            "kube_dra_exporter_watch_last_event_timestamp_seconds",
            "Unix time of the last event received for the resource.",
            self._last_event,
        )
        failing = _labelled(
            GaugeMetricFamily,
            "kube_dra_exporter_watch_failing_since_timestamp_seconds",
            "Unix time since which the resource's watch has failed (absent while it is current).",
            self._failing_since,
        )
        staleness = GaugeMetricFamily(
            "kube_dra_exporter_max_staleness_seconds",
            "--max-staleness: past this long failing, scrapes answer 500 instead of old state.",
            value=self._max_staleness,
        )
        lag = GaugeMetricFamily(
            "kube_dra_exporter_watch_lag_seconds",
            "Seconds the oldest event received and not applied yet has waited (0: none waits).",
            labels=["resource"],
        )
        waiting = GaugeMetricFamily(
            "kube_dra_exporter_watch_events_waiting",
            "Events received and not applied yet.",
            labels=["resource"],
        )
        for resource, (seconds, count) in sorted(self._behind().items()):
            lag.add_metric([resource], seconds)
            waiting.add_metric([resource], count)
        yield from (synced, events, relists, restarts, last, failing, staleness, lag, waiting)


def _labelled(
    kind: Callable[..., GaugeMetricFamily | CounterMetricFamily],
    name: str,
    help_text: str,
    values: Mapping[Any, float],
    label: str | None = None,
) -> Metric:
    """A family by resource (and *label*, the second part of each key), in order of its keys."""
    made = kind(name, help_text, labels=["resource"] if label is None else ["resource", label])
    for key, value in sorted(values.items()):
        made.add_metric(list(key) if label is not None else [key], value)
    return made
