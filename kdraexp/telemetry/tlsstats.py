"""The served certificate's expiry and how its reloads went, so that an alert sees both."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

RESULTS = ("success", "failure")


class TLSStats(Collector):
    """The certificate served now and the reloads of ``--tls-config`` by result."""

    def __init__(self) -> None:
        self.not_after: float | None = None
        """The served certificate's notAfter, seconds since the epoch."""
        self.last_successful = True
        """Whether the last reading of the changed files is what is served."""
        self._reloads = dict.fromkeys(RESULTS, 0)

    def reloaded(self, result: str) -> None:
        """Count one reload of changed files (``success``: served from now on)."""
        self._reloads[result] += 1
        self.last_successful = result == "success"

    def collect(self) -> Iterator[Metric]:
        """The three families (nothing before a certificate is served)."""
        if self.not_after is None:
            return
        yield GaugeMetricFamily(
            "kube_dra_exporter_tls_certificate_not_after_timestamp_seconds",
            "When the certificate served to new connections expires, seconds since the epoch.",
            value=self.not_after,
        )
        reloads = CounterMetricFamily(
            "kube_dra_exporter_tls_reloads",
            "Readings of changed --tls-config files, by result (failure: the old pair serves).",
            labels=["result"],
        )
        for result, count in self._reloads.items():
            reloads.add_metric([result], count)
        yield reloads
        yield GaugeMetricFamily(
            "kube_dra_exporter_tls_last_reload_successful",
            "1 when what --tls-config names now is what is served; 0 while a change fails to load.",
            value=1.0 if self.last_successful else 0.0,
        )
