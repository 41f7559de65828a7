"""The memory limit, published, and a peak near it said before the kernel kills the exporter.

A limit too small for the cluster gets the container killed at its next large collection,
restarted and killed again at the same point, and no scrape is answered meanwhile: only the
pod's last state says why. So every :data:`LOOK` seconds the cgroup's limit and the exporter's
peak resident memory (its evaluation process's included) are read and published, and a peak
past :data:`SHARE` of the limit is logged, once while it lasts, with the figures and where the
README sizes the limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from kdraexp import __version__
from kdraexp.util.cgroup import MemoryCgroup
from kdraexp.util.peakrss import peak_rss

log = Logger()

LOOK = 5.0
"""Seconds between two reads (the kernel keeps each process's peak meanwhile)."""
SHARE = 0.8
"""The share of the limit past which a peak is said: room for a selector's evaluation process
(up to 64 MiB more for a moment) and for a cluster that grows."""
SIZING = f"https://github.com/gradiant/kube-dra-exporter/blob/v{__version__}/README.md#sizing"
"""Where the README gives the memory limit for a cluster's size."""
MIB = 2**20


class MemoryWatch(Collector):
    """Reads *cgroup*'s limit (None: no cgroup found) and *peak* every :data:`LOOK` seconds."""

    def __init__(
        self,
        clock: IReactorTime,
        cgroup: MemoryCgroup | None,
        peak: Callable[[], int | None] = peak_rss,
    ) -> None:
        self._cgroup = cgroup
        self._read_peak = peak
        self._limit: int | None = None
        self._peak: int | None = None
        """The most seen: a child's peak ends with it, so the sum may fall."""
        self._near = False
        """Whether the peak is past :data:`SHARE` of the limit (and was said)."""
        self._looking = LoopingCall(self.look)
        self._looking.clock = clock

    def start(self) -> None:
        """Read now, then every :data:`LOOK` seconds."""
        self._looking.start(LOOK, now=True)

    def stop(self) -> None:
        """Stop reading."""
        if self._looking.running:
            self._looking.stop()

    def look(self) -> None:
        """Read the limit and the peak; say so once when the peak passes :data:`SHARE` of it."""
        self._limit = limit = self._cgroup.limit() if self._cgroup is not None else None
        now = self._read_peak()
        if now is not None:
            self._peak = max(self._peak or 0, now)
        peak = self._peak
        near = limit is not None and peak is not None and peak >= SHARE * limit
        if limit is not None and peak is not None and near and not self._near:
            log.warn(
                "Memory: the exporter has held up to {peak:.0f} MiB, {used:.0%} of its"
                " container's {limit:.0f} MiB limit; past the limit the kernel kills it, at every"
                " collection as large: raise resources.limits.memory for this cluster's size"
                " ({sizing}) (logged once while it lasts)",
                peak=peak / MIB,
                used=peak / limit,
                limit=limit / MIB,
                sizing=SIZING,
            )
        self._near = near

    def collect(self) -> Iterator[Metric]:
        """The limit, when there is one, and the peak, once read."""
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
                "The most resident memory the exporter has held, its evaluation process's"
                " included (the kernel's high-water marks, summed).",
                value=self._peak,
            )
