"""What a kind declares once: its view, its facts, its shard key, when it is read, what it needs.

Each families/<kind>.py module declares one :class:`KindSpec`, and :data:`kdraexp.families.KINDS`
maps each listed kind to it, as kube-state-metrics keeps one store builder per kind.  The
collection, sharding, the list gatherer and the watches read these declarations and never name
a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from kdraexp.dra.listing import Kind
from kdraexp.families.context import Context


@attrs.frozen
class ShardKey:
    """Where an object belongs when the cluster is sharded.

    *home* is the key of the shard that writes it, *readers* the keys of the shards that must
    read its facts too (a claim, for every pool it uses).
    """

    home: str
    readers: tuple[str, ...] = ()


def _no_facts(view: Any, written: bool) -> Any:
    return None


@attrs.frozen
class KindSpec:
    """One listed kind, declared by the families module of that kind."""

    kind: Kind
    view: Callable[[Any, Context], Any]
    """Reads one decoded object once for all the kind's families."""
    facts: Callable[[Any, bool], Any] = _no_facts
    """What the cross-object families need of the view; the flag says whether this shard
    writes the object (False: another shard writes it, its facts are read only)."""
    shard_key: Callable[[Any], ShardKey] | None = None
    """Where a decoded object belongs; None: the first shard writes every object, the others
    read them all (classes and taint rules are small and every shard needs them)."""
    first: bool = False
    """Listed and synchronised before the kinds that are not: they are read with it."""
    classes: bool = False
    """Its facts are the DeviceClasses (:class:`kdraexp.cel.classindex.ClassEntry`) the kinds
    that ``read_classes`` are read with."""
    reads_classes: bool = False
    """Its entries depend on the classes: when they change, its objects are read again (from
    what is kept, in watch mode: no list is made again)."""
    keeps_source: bool = False
    """Its facts keep the object's JSON, deflated, in their ``source``: the cluster families
    read it again (a claim's own selectors are judged on the devices of the slices)."""
    parts: Callable[[Any], int] | None = None
    """How many parts a decoded object holds that each become rows and facts of their own (a
    slice's devices): a page may hold so many (see ``KindReader``)."""
