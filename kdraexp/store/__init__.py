"""What is kept between scrapes: the collection, cross-object rows, blocks and shards.

Imports :mod:`kdraexp.families`, :mod:`kdraexp.allocator` (through its face alone),
:mod:`kdraexp.cel`, :mod:`kdraexp.dra` and :mod:`kdraexp.util`; never a source, the Kubernetes
client or the exposition.
"""
