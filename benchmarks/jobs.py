"""Upstream's DRA scale job, as the fake API plays it: every claim's whole life, as events.

Kubernetes' own DRA scale test (perf-tests clusterloader2, ``testing/dra``) fills a cluster of
8 GPUs a node to 90% with one-GPU long-running jobs at 10-50 a second, then churns one-GPU jobs
of 30 seconds at 5 a second.  Here each claim goes through what the scheduler, the kubelet and
the claim controller write: created (pending), allocated, reserved for its pod; a short job's
claim then released (its status emptied as its pod ended) and deleted.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from benchmarks.cluster import gpu_claim

FILL = 0.9
"""The share of the devices the long-running jobs take."""
STEP = 0.05
"""Seconds from one step of a claim's scheduling to the next (created, allocated, reserved)."""
JOB_SECONDS = 30.0
"""How long a short job's pod runs."""
PROBES = 1
"""Devices the short jobs leave free, for the claims a benchmark makes step by step."""
STEPS = ("created", "allocated", "reserved", "released", "deleted")
"""A claim's life, in order; what :meth:`ScaleJob.step` can make happen to a claim."""
STATES = {
    "created": "pending",
    "allocated": "allocated",
    "reserved": "reserved",
    "released": "pending",
    "deleted": None,
}
"""The claim's state after each step, as ``kube_resourceclaim_status_state`` writes it."""


class ScaleJob:
    """Fills a cluster, then churns short jobs, each claim's every step a change of *change*.

    *change* is ``Pages.change``; *slices* the cluster's ResourceSlices, whose devices the
    claims take in turn, one node after another, so that the jobs spread over every node;
    *clock* and *sleep* tell and pass the time.
    """

    def __init__(
        self,
        change: Callable[[str, str, dict[str, Any]], float],
        slices: list[dict[str, Any]],
        rate: float,
        churn: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._change = change
        self._clock, self._sleep = clock, sleep
        self.rate = rate
        self.churn = churn
        width = max(len(s["spec"]["devices"]) for s in slices)
        self._free: deque[tuple[int, str]] = deque(
            (node, made["spec"]["devices"][slot]["name"])
            for slot in range(width)
            for node, made in enumerate(slices)
            if slot < len(made["spec"]["devices"])
        )
        self.fill = int(FILL * len(self._free))
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        self._held: dict[str, tuple[int, int, str]] = {}
        """Each live claim's number, node and device, by name."""
        self.created = 0
        """Long-running claims created so far."""
        self.filled = False
        """Whether every long-running claim is reserved."""
        self.short = 0
        """Short jobs started so far."""
        self.waiting = 0
        """Short jobs not started for want of a free device (a small cluster's)."""

    def run(self) -> None:
        """Fill, then churn until the process ends."""
        begin = self._clock()
        queue: list[tuple[float, int, Callable[[], object]]] = []
        order = itertools.count()

        def later(delay: float, work: Callable[[], object]) -> None:
            heapq.heappush(queue, (self._clock() + delay, next(order), work))

        def long_job(index: int) -> None:
            name = f"long-{index:05d}"
            self.step(name, "created")
            self.created += 1
            later(STEP, lambda: self.step(name, "allocated"))
            last = index == self.fill - 1
            later(2 * STEP, lambda: self._reserve_long(name, last))

        def short_job() -> None:
            later(1 / self.churn, short_job)
            if len(self._free) <= PROBES:
                self.waiting += 1
                return
            name = f"short-{self.short:06d}"
            self.short += 1
            self.step(name, "created")
            later(STEP, lambda: self.step(name, "allocated"))
            later(2 * STEP, lambda: self.step(name, "reserved"))
            later(2 * STEP + JOB_SECONDS, lambda: self.step(name, "released"))
            later(3 * STEP + JOB_SECONDS, lambda: self.step(name, "deleted"))

        for index in range(self.fill):
            later(begin + index / self.rate - self._clock(), functools.partial(long_job, index))
        later(begin + self.fill / self.rate + 3 * STEP - self._clock(), short_job)
        while queue:
            due, _, work = queue[0]
            wait = due - self._clock()
            if wait > 0:
                self._sleep(wait)
                continue
            heapq.heappop(queue)
            work()

    def _reserve_long(self, name: str, last: bool) -> None:
        self.step(name, "reserved")
        if last:
            self.filled = True

    def step(self, name: str, step: str) -> float:
        """Make claim *name* take *step* (one of :data:`STEPS`) now; when it was made."""
        with self._lock:
            if step == "created":
                node, device = self._free.popleft()
                self._held[name] = (next(self._numbers), node, device)
            number, node, device = self._held[name]
            if step == "released":
                self._free.append((node, device))
            if step == "deleted":
                del self._held[name]
        state = STATES[step] or "pending"
        claim = gpu_claim(name, f"team-{node % 16:02d}", number, node, device, state)
        event = {"created": "ADDED", "deleted": "DELETED"}.get(step, "MODIFIED")
        return self._change("resourceclaims", event, claim)
