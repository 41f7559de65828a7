"""The memory limit, published, and a peak near it said before the kernel kills the exporter.

A limit too small for the cluster gets the container killed at its next large collection,
restarted and killed again at the same point, and no scrape is answered meanwhile: only the
pod's last state says why. So the cgroup is read every :data:`LOOK` seconds: its limit and the
most it has held are published, and a peak past :data:`SHARE` of the limit is logged, once while
it lasts, with the figures and where the README sizes the limit.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from kdraexp import __version__
from kdraexp.util.cgroup import MemoryCgroup

log = Logger()

LOOK = 2.0
"""Seconds between two reads of the cgroup (the kernel's own peak misses nothing between)."""
SHARE = 0.8
"""The share of the limit past which a peak is said: room for a selector's evaluation process
(up to 64 MiB more for a moment) and for a cluster that grows."""
SIZING = f"https://github.com/gradiant/kube-dra-exporter/blob/v{__version__}/README.md#sizing"
"""Where the README gives the memory limit for a cluster's size."""
MIB = 2**20


class MemoryWatch(Collector):
    """Reads *cgroup* (None: none found) every :data:`LOOK` seconds; publishes and warns."""

    def __init__(self, clock: IReactorTime, cgroup: MemoryCgroup | None) -> None:
        self._cgroup = cgroup
        self._limit: int | None = None
        self._peak: int | None = None
        """The most the cgroup has held: the kernel's high-water mark, or the most seen."""
        self._near = False
        """Whether the peak is past :data:`SHARE` of the limit (and was said)."""
        self._looking = LoopingCall(self.look)
        self._looking.clock = clock

    def start(self) -> None:
        """Read the cgroup now, then every :data:`LOOK` seconds."""
        if self._cgroup is not None:
            self._looking.start(LOOK, now=True)

    def stop(self) -> None:
        """Stop reading it."""
        if self._looking.running:
            self._looking.stop()

    def look(self) -> None:
        """Read the cgroup; say so once when its peak passes :data:`SHARE` of its limit."""
        use = self._cgroup.read() if self._cgroup is not None else None
        if use is None:
            return
        self._limit = limit = use.limit
        self._peak = peak = max(self._peak or 0, use.current, use.peak or 0)
        near = limit is not None and peak >= SHARE * limit
        if limit is not None and near and not self._near:
            log.warn(
                "Memory: the exporter's container has held up to {peak:.0f} MiB, {used:.0%} of"
                " its {limit:.0f} MiB limit; past the limit the kernel kills it, at every"
                " collection as large: raise resources.limits.memory for this cluster's size"
                " ({sizing}) (logged once while it lasts)",
                peak=peak / MIB,
                used=peak / limit,
                limit=limit / MIB,
                sizing=SIZING,
            )
        self._near = near

    def collect(self) -> Iterator[Metric]:
        """The limit, when there is one, and the peak, when a cgroup was read."""
        if self._limit is not None:
            yield GaugeMetricFamily(
                "kube_dra_exporter_memory_limit_bytes",
                "The memory limit of the exporter's cgroup (its container's), past which the"
                " kernel kills it.",
                value=self._limit,
            )
        if self._peak is not None:
            yield GaugeMetricFamily(
                "kube_dra_exporter_memory_peak_bytes",
                "The most memory the exporter's cgroup has held, page cache included, as the"
                " kernel counts it against the limit.",
                value=self._peak,
            )
