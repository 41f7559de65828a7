"""Helpers with no knowledge of Kubernetes: turns, single flight, bounded file reads, labels.

Imports nothing of kdraexp.
"""
