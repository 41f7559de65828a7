"""Helpers that know nothing of Kubernetes: turns, single flight, file reads, labels, packed JSON.

And what the process may hold and has held: its memory cgroup's limit, its peak RSS. Imports
nothing of kdraexp.
"""
