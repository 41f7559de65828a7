"""A finished collection as a prometheus_client Collector, for code that embeds kdraexp.

``/metrics`` is written by the direct encoder (:mod:`kdraexp.exposition.text`), which is about ten
times faster; this Collector yields the same rows as prometheus_client metric families, so a
collection can be registered in any ``CollectorRegistry`` and written by prometheus_client's own
encoders.  A test proves both write the same samples, for every family.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from kdraexp.families.family import Family
from kdraexp.store.collection import Collection


class CollectionCollector(Collector):
    """Every family of one collection, as prometheus_client gauges."""

    def __init__(self, collection: Collection) -> None:
        self._collection = collection

    def describe(self) -> Iterator[Metric]:
        """The families, without their samples."""
        for family, _ in self._collection.families():
            yield _metric(family)

    def collect(self) -> Iterator[Metric]:
        """The families with their samples."""
        for family, rows in self._collection.families():
            metric = _metric(family)
            for row in rows:
                metric.add_sample(family.name, family.labels_of(row), row[-1])
            yield metric


def _metric(family: Family) -> Metric:
    """An empty gauge family: each sample brings its labels (an object's own vary)."""
    return Metric(family.name, family.help, family.type)
