"""Which kinds the join reads, and how: the one place the cross-object families name a kind.

The store hands over every kind's facts by resource; this picks out what the index is made of.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import attrs

from kdraexp.allocator.facts import ClaimFacts, NodeFacts, PodFacts, RuleFacts, SliceFacts
from kdraexp.dra.listing import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NODES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)

REMADE_BY = (RESOURCE_SLICES.plural, DEVICE_CLASSES.plural, DEVICE_TAINT_RULES.plural)
"""The resources whose change makes the whole index again (claims are followed one by one)."""
CLUSTER_NEEDS = frozenset({DEVICE_TAINT_RULES.plural})
"""What every cross-object family's key includes besides its needs: taint rules change device
states, though a family is written without them."""


C = TypeVar("C")
"""How the store records a change of a kind's facts (the join only hands the claims' on)."""


@attrs.frozen
class Inputs(Generic[C]):
    """One collection's facts, as the join reads them."""

    slices: list[SliceFacts]
    claims: dict[str, ClaimFacts]
    """Every claim by its key, in the order listed."""
    rules: list[RuleFacts]
    pods: Mapping[str, PodFacts | None]
    """Every pod listed by its key: its facts if it matters, else None."""
    nodes: Mapping[str, NodeFacts] | None
    """Every Node listed by its key; None when Nodes are not listed."""
    base: tuple[int, ...]
    """The versions of :data:`REMADE_BY`: while they are the same, only claims changed."""
    claims_changed: C | None
    """How the claims' facts changed since the last collection, if the store knows."""


def join_inputs(
    facts: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, int],
    changes: Mapping[str, C],
) -> Inputs[C]:
    """What the index is made of, from every kind's *facts*, *versions* and *changes*."""
    claims: Any = facts.get(RESOURCE_CLAIMS.plural, {})
    return Inputs(
        list(facts.get(RESOURCE_SLICES.plural, {}).values()),
        claims,
        list(facts.get(DEVICE_TAINT_RULES.plural, {}).values()),
        facts.get(PODS.plural, {}),
        facts.get(NODES.plural),
        tuple(versions.get(plural, 0) for plural in REMADE_BY),
        changes.get(RESOURCE_CLAIMS.plural),
    )


def pool_key(driver: str, pool: str) -> str:
    """The shard key of a pool: every family of a pool is made within one shard."""
    return f"{driver}/{pool}"
