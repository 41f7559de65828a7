"""Bytes for Prometheus: the text encoder, the block-wise renderer with gzip, and a Collector.

Imports :mod:`kdraexp.store`, :mod:`kdraexp.families` and :mod:`kdraexp.util`.
"""
