"""The allocator's model: the join of every kind's facts, and what the scheduler would do with it.

``index`` joins the facts each slice, claim, rule and pod leaves behind; ``headroom`` is the
allocator's first fit per pool; ``pending`` says why a pending request cannot be allocated,
reading slices again through ``selectorread``; ``idlecost`` prices what is free.  The families
read these modules; the store builds and follows the index through this face alone.

Synchronous and free of I/O.  Imports :mod:`kdraexp.cel` (claims' selectors), :mod:`kdraexp.dra`
and :mod:`kdraexp.util`; never a family, the store or a source.
"""

from __future__ import annotations

from kdraexp.allocator.index import ClaimFacts, ClusterIndex, Pools, Round, RuleFacts, SliceFacts
from kdraexp.allocator.pending import SelectorAnswers

__all__ = [
    "ClaimFacts",
    "ClusterIndex",
    "Pools",
    "Round",
    "RuleFacts",
    "SelectorAnswers",
    "SliceFacts",
]
