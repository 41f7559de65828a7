"""Helpers that know nothing of Kubernetes: turns, single flight, file reads, labels, packed JSON,
the memory cgroup.

Imports nothing of kdraexp.
"""
