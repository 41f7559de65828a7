"""The exporter's own metrics: collections, watches, the HTTP listeners, the memory
limit.

Imports :mod:`kdraexp.store` (for the shard's labels) and :mod:`kdraexp.util`.
"""
