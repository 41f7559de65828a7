"""The auth filter's own metrics: requests by outcome, reviews sent, entries cached."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kdraexp.telemetry.selfmetrics import counted

OUTCOMES = ("allowed", "unauthenticated", "forbidden", "error", "overloaded")
"""What the filter made of a request (the probes, which it lets through, are not counted)."""
REVIEWS = {
    "tokenreview": ("authenticated", "unauthenticated", "error", "timeout"),
    "subjectaccessreview": ("allowed", "denied", "error", "timeout"),
}
"""Per kind of review sent, its results."""


class AuthFilterStats(Collector):
    """Requests the filter judged, by listener and outcome; reviews sent; entries cached.

    Every outcome and result is written from the start, at zero, so a rate reads from the
    first scrape.
    """

    def __init__(self, listeners: tuple[str, ...] = ("main", "telemetry")) -> None:
        self._requests = {(listener, o): 0 for listener in listeners for o in OUTCOMES}
        self._reviews = {(kind, r): 0 for kind, results in REVIEWS.items() for r in results}
        self.entries: Callable[[], int] = lambda: 0
        """How many results the filter's cache holds now (set by the filter)."""

    def judged(self, listener: str, outcome: str) -> None:
        """Count one request the filter answered or let through."""
        self._requests[(listener, outcome)] = self._requests.get((listener, outcome), 0) + 1

    def reviewed(self, kind: str, result: str) -> None:
        """Count one review sent to the API server, by what came of it."""
        self._reviews[(kind, result)] += 1

    def collect(self) -> Iterator[Metric]:
        """The three families."""
        requests = counted(
            "kube_dra_exporter_auth_filter_requests",
            "Requests the auth filter judged, by listener and outcome.",
            ["listener", "outcome"],
            self._requests,
        )
        reviews = counted(
            "kube_dra_exporter_auth_filter_reviews",
            "TokenReviews and SubjectAccessReviews sent to the API server, by kind and result.",
            ["kind", "result"],
            self._reviews,
        )
        entries = GaugeMetricFamily(
            "kube_dra_exporter_auth_filter_cache_entries",
            "Review results the auth filter holds in its cache.",
            value=self.entries(),
        )
        yield requests
        yield reviews
        yield entries
