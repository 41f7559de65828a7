"""The exporter's own metrics: what runs, how the lists went, the process."""

from __future__ import annotations

import platform
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from kdraexp import __version__


class ListStats(Collector):
    """Duration and size of each resource's last completed list, and failures by reason."""

    def __init__(self) -> None:
        self._duration: dict[str, float] = {}
        self._objects: dict[str, int] = {}
        self._errors: dict[tuple[str, str], int] = {}

    def listed(self, resource: str, objects: int, seconds: float) -> None:
        """Record a completed list."""
        self._duration[resource] = seconds
        self._objects[resource] = objects

    def failed(self, resource: str, reason: str) -> None:
        """Record a failed list."""
        key = (resource, reason)
        self._errors[key] = self._errors.get(key, 0) + 1

    def describe(self) -> Iterator[Metric]:
        """The families, without collecting (keeps registration free of side effects)."""
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        """The families with their current values."""
        duration, objects, errors = self._families()
        for resource, seconds in sorted(self._duration.items()):
            duration.add_metric([resource], seconds)
        for resource, count in sorted(self._objects.items()):
            objects.add_metric([resource], count)
        for (resource, reason), count in sorted(self._errors.items()):
            errors.add_metric([resource, reason], count)
        yield from (duration, objects, errors)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, CounterMetricFamily]:
        return (
            GaugeMetricFamily(
                "kube_dra_exporter_list_duration_seconds",
                "Wall time of the last completed list of the resource.",
                labels=["resource"],
            ),
            GaugeMetricFamily(
                "kube_dra_exporter_list_objects",
                "Objects in the last completed list of the resource.",
                labels=["resource"],
            ),
            CounterMetricFamily(
                "kube_dra_exporter_list_errors",
                "Failed lists of the resource, by Kubernetes reason or Timeout/Transport/Decode.",
                labels=["resource", "reason"],
            ),
        )


class BuildInfo(Collector):
    """``kube_dra_exporter_build_info``: what is running."""

    def collect(self) -> Iterator[Metric]:
        """One sample, always 1."""
        info = GaugeMetricFamily(
            "kube_dra_exporter_build_info",
            "Version of the exporter and of Python; always 1.",
            labels=["version", "python_version"],
        )
        info.add_metric([__version__, platform.python_version()], 1)
        yield info


def registry(stats: ListStats) -> CollectorRegistry:
    """A registry of the exporter's own metrics; never the global one."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(BuildInfo())
    registry.register(stats)
    registry.register(ProcessCollector(registry=None))
    return registry
