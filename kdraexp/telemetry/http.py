"""The HTTP listeners' own metrics: requests answered and how long they took."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kdraexp.telemetry.selfmetrics import counted

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Request duration buckets, seconds: /healthz in the first, large scrapes in the last."""


class HTTPStats(Collector):
    """Requests answered, by listener, handler and code, and how long they took."""

    def __init__(self) -> None:
        self._requests: dict[tuple[str, str, str], int] = {}
        self._durations: dict[tuple[str, str], list[float]] = {}
        """Per (listener, handler): count per bucket (cumulative when collected), then the sum."""

    def answered(self, listener: str, handler: str, code: int, seconds: float) -> None:
        """Count one finished request."""
        counted = (listener, handler, str(code))
        self._requests[counted] = self._requests.get(counted, 0) + 1
        counts = self._durations.setdefault((listener, handler), [0.0] * (len(BUCKETS) + 2))
        index = next((i for i, bound in enumerate(BUCKETS) if seconds <= bound), len(BUCKETS))
        counts[index] += 1
        counts[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        """The two families."""
        requests = counted(
            "kube_dra_exporter_http_requests",
            "HTTP requests answered, by listener, handler and status code.",
            ["listener", "handler", "code"],
            self._requests,
        )
        durations = HistogramMetricFamily(
            "kube_dra_exporter_http_request_duration_seconds",
            "Time from a request's headers to the end of its answer, by listener and handler.",
            labels=["listener", "handler"],
        )
        for key, counts in sorted(self._durations.items()):
            cumulative, buckets = 0.0, list[tuple[str, float]]()
            for bound, observed in zip([*map(str, BUCKETS), "+Inf"], counts[:-1], strict=True):
                cumulative += observed
                buckets.append((bound, cumulative))
            durations.add_metric(list(key), buckets, counts[-1])
        yield requests
        yield durations
