"""The exporter's own metrics: collections, watches and the HTTP listeners.

Imports :mod:`kdraexp.store` (for the shard's labels) and :mod:`kdraexp.util`.
"""
