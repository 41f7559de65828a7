"""Reactor helpers with no knowledge of Kubernetes: turns, single flight, bounded file reads.

Imports nothing of kdraexp.
"""
