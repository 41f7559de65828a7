"""The exporter's own metrics: what runs, how the lists went, the process."""

from __future__ import annotations

import platform
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from kdraexp import __version__
from kdraexp.store.sharding import Shard


def counted(
    name: str, help: str, labels: list[str], counts: Mapping[Any, float]
) -> CounterMetricFamily:
    """A counter family of *counts*, each keyed by its label values (a tuple), in their order."""
    family = CounterMetricFamily(name, help, labels=labels)
    for values, count in sorted(counts.items()):
        family.add_metric(list(values), count)
    return family


class CollectionStats(Collector):
    """How collections went: each list's duration, size and failures, and values not read."""

    def __init__(self, timeout: float | None = None, shard: Shard | None = None) -> None:
        self._timeout = timeout
        """--timeout, exported so that alerts can compare list durations with it."""
        self._shard = shard if shard is not None and not shard.whole else None
        """The shard, when the cluster is sharded (its two families are written then only)."""
        self._duration: dict[str, float] = {}
        self._objects: dict[str, int] = {}
        self._errors: dict[tuple[str, str], int] = {}
        self._invalid: dict[tuple[str, str], int] = {}
        self._truncated: dict[tuple[str, str], int] = {}
        self._cel_errors: dict[str, int] = {}

    def listed(self, resource: str, objects: int, seconds: float) -> None:
        """Record a completed list."""
        self._duration[resource] = seconds
        self._objects[resource] = objects

    def holding(self, resource: str, objects: int) -> None:
        """Record the objects a watch holds now (its last full list's duration stays)."""
        self._objects[resource] = objects

    def failed(self, resource: str, reason: str) -> None:
        """Record a failed list."""
        key = (resource, reason)
        self._errors[key] = self._errors.get(key, 0) + 1

    def invalid(self, resource: str, field: str, count: int = 1) -> None:
        """Record *count* values of *field* left out because they could not be read."""
        key = (resource, field)
        self._invalid[key] = self._invalid.get(key, 0) + count

    def truncated(self, resource: str, field: str, count: int = 1) -> None:
        """Record *count* label or annotation values of *field* written cut short."""
        key = (resource, field)
        self._truncated[key] = self._truncated.get(key, 0) + count

    def cel_errors(self, deviceclass: str, devices: int) -> None:
        """Record devices whose match with a class could not be decided."""
        self._cel_errors[deviceclass] = self._cel_errors.get(deviceclass, 0) + devices

    def describe(self) -> Iterator[Metric]:
        """The families, without collecting (keeps registration free of side effects)."""
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        """The families with their current values."""
        duration, objects, errors, invalid, truncated, cel = self._families()
        for resource, seconds in sorted(self._duration.items()):
            duration.add_metric([resource], seconds)
        for resource, count in sorted(self._objects.items()):
            objects.add_metric([resource], count)
        for (resource, reason), count in sorted(self._errors.items()):
            errors.add_metric([resource, reason], count)
        for (resource, field), count in sorted(self._invalid.items()):
            invalid.add_metric([resource, field], count)
        for (resource, field), count in sorted(self._truncated.items()):
            truncated.add_metric([resource, field], count)
        for deviceclass, count in sorted(self._cel_errors.items()):
            cel.add_metric([deviceclass], count)
        yield from (duration, objects, errors, invalid, truncated, cel)
        if self._timeout is not None:
            yield GaugeMetricFamily(
                "kube_dra_exporter_collection_timeout_seconds",
                "Seconds one whole collection may take (--timeout).",
                value=self._timeout,
            )
        if self._shard is not None:
            yield GaugeMetricFamily(
                "kube_dra_exporter_shard_ordinal",
                "The shard this exporter writes (--shard, or its pod's ordinal).",
                value=self._shard.index,
            )
            yield GaugeMetricFamily(
                "kube_dra_exporter_total_shards",
                "Shards the cluster is split over (--total-shards).",
                value=self._shard.total,
            )

    @staticmethod
    def _families() -> tuple[
        GaugeMetricFamily,
        GaugeMetricFamily,
        CounterMetricFamily,
        CounterMetricFamily,
        CounterMetricFamily,
        CounterMetricFamily,
    ]:
        return (
            GaugeMetricFamily(
                "kube_dra_exporter_list_duration_seconds",
                "Wall time of the last completed list of the resource (in watch mode: the last"
                " full list, the first synchronisation or a re-list).",
                labels=["resource"],
            ),
            GaugeMetricFamily(
                "kube_dra_exporter_list_objects",
                "Objects in the last completed list of the resource (in watch mode: held now).",
                labels=["resource"],
            ),
            CounterMetricFamily(
                "kube_dra_exporter_list_errors",
                "Failed lists of the resource, by Kubernetes reason or Timeout/Transport/Decode.",
                labels=["resource", "reason"],
            ),
            CounterMetricFamily(
                "kube_dra_exporter_invalid_values",
                "Values left out of the metrics because they could not be read, by field.",
                labels=["resource", "field"],
            ),
            CounterMetricFamily(
                "kube_dra_exporter_truncated_values",
                "Label and annotation values written cut short to the most characters a value"
                " may have, or left out past the most keys a * takes of an object, by field.",
                labels=["resource", "field"],
            ),
            CounterMetricFamily(
                "kube_dra_exporter_cel_errors",
                "Devices whose match with a DeviceClass's CEL selectors could not be decided.",
                labels=["deviceclass_name"],
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


def registry(*collectors: Collector) -> CollectorRegistry:
    """A registry of the exporter's own metrics (with *collectors*); never the global one.

    Build information, then the process (CPU, memory, open files) and the Python runtime
    (version, garbage collector), as prometheus_client's default registry has them.
    """
    registry = CollectorRegistry(auto_describe=True)
    registry.register(BuildInfo())
    for collector in collectors:
        registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
