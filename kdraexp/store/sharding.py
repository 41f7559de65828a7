"""Which objects a shard writes, so that several exporters split one cluster.

An object belongs to the shard its key hashes to (the first eight bytes of its SHA-256, modulo
the number of shards: stable across processes and versions, unlike Python's ``hash``).  Each
kind declares its key (:class:`kdraexp.families.kind.KindSpec`); the keys are what make every
family computable inside one shard:

- a ResourceSlice's key is its pool (driver/pool): a pool's slices, devices, counters and
  states are all in one shard;
- a ResourceClaim's key is the pool of its first allocation result, else (pending) its
  namespace/name.  A shard also reads, without writing its rows, each claim with a result in one
  of its pools: its devices are allocated there;
- DeviceClasses and DeviceTaintRules are read by every shard (devices are matched and tainted
  with them) and written by shard 0.

The union of every shard's samples is the unsharded exposition, but for a claim with results in
pools of two shards that uses a shareable device of the other shard: its cost share is unknown
in its own shard.
"""

from __future__ import annotations

import hashlib
import re
from enum import Enum

import attrs

from kdraexp.families.kind import ShardKey


class Part(Enum):
    """What a shard does with one object."""

    WRITE = "write"
    """Its rows and its facts: the object is this shard's."""
    READ = "read"
    """Its facts only: another shard writes it, but this shard's figures depend on it."""
    SKIP = "skip"


@attrs.frozen
class Shard:
    """Shard *index* of *total* (0 of 1: everything)."""

    index: int = 0
    total: int = 1

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.index < self.total:
            raise ValueError(f"shard {self.index} of {self.total}: expected 0 <= shard < total")

    @property
    def whole(self) -> bool:
        """Whether this is the only shard."""
        return self.total == 1

    def owns(self, key: str) -> bool:
        """Whether *key* hashes to this shard."""
        if self.total == 1:
            return True
        digest = hashlib.sha256(key.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.total == self.index

    def part(self, key: ShardKey | None) -> Part:
        """What this shard does with an object whose kind places it at *key* (see KindSpec)."""
        if self.total == 1:
            return Part.WRITE
        if key is None:
            return Part.WRITE if self.index == 0 else Part.READ
        if self.owns(key.home):
            return Part.WRITE
        return Part.READ if any(self.owns(reader) for reader in key.readers) else Part.SKIP


_ORDINAL = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?-([0-9]{1,9})", re.ASCII)
"""A pod name (a DNS subdomain: lowercase letters, digits, '-' and '.') ending in its ordinal;
matched whole, since ``$`` would also match before a trailing newline."""


def ordinal(pod: str) -> int:
    """The ordinal of a StatefulSet's pod from its name (``kdraexp-2`` is 2).

    :raises ValueError: when the name is not a pod name ending in ``-<number>``.
    """
    match = _ORDINAL.fullmatch(pod)
    if match is None:
        raise ValueError(f"--pod {pod!r}: not a StatefulSet pod name (NAME-ORDINAL)")
    return int(match.group(1))
