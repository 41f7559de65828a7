"""The exporter's own metrics: collections, watches, the HTTP listeners, its memory.

Imports :mod:`kdraexp.store` (for the shard's labels) and :mod:`kdraexp.util`.
"""
