"""Helpers that know nothing of Kubernetes: turns, single flight, file reads, labels, packed JSON.

Imports nothing of kdraexp.
"""
