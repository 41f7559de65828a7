"""The allocator's model: the join of every kind's facts, and what the scheduler would do with it.

``facts`` are what each slice, claim, rule and pod leaves behind; ``join`` says which kinds the
index is made of; ``index`` joins them; ``scopes`` declares what a cross-object family's rows come
in sets of.  ``headroom`` is the allocator's first fit per pool; ``pending`` says why a pending
request cannot be allocated, from the devices ``candidates`` finds (claims' own selectors
answered by ``answers``, slices read again through ``selectorread``; what a request consumes of
a shared device rounded by ``rounding``) and ``together``'s search;
``idlecost`` prices what is free; with the Node view, ``nodes`` says which Nodes pools and
drivers serve and ``reach`` whether a request's devices are where its pods may run.  The families
read these modules; the store builds and follows the index through this face alone.

Synchronous and free of I/O: it starts no process, thread or reactor.  Imports
:mod:`kdraexp.cel` (the claims' selectors are evaluated by the matcher it is handed, which talks
to the CEL process), :mod:`kdraexp.dra` and :mod:`kdraexp.util`; never a family, the store or a
source.
"""

from __future__ import annotations

from kdraexp.allocator.answers import SelectorAnswers
from kdraexp.allocator.facts import ClaimFacts, NodeFacts, PodFacts, RuleFacts, SliceFacts
from kdraexp.allocator.index import ClusterIndex, Pools, Round, current
from kdraexp.allocator.join import CLUSTER_NEEDS, Inputs, join_inputs, pool_key
from kdraexp.allocator.scopes import ALL_CHANGED, SCOPES, AllChanged, Join, Per, Touched

__all__ = [
    "ALL_CHANGED",
    "CLUSTER_NEEDS",
    "SCOPES",
    "AllChanged",
    "ClaimFacts",
    "ClusterIndex",
    "Inputs",
    "Join",
    "NodeFacts",
    "Per",
    "PodFacts",
    "Pools",
    "Round",
    "RuleFacts",
    "SelectorAnswers",
    "SliceFacts",
    "Touched",
    "current",
    "join_inputs",
    "pool_key",
]
