"""The DRA model: wire structs, the list contract, gated fields, quantities and problems.

Pure and synchronous: no process, thread, memory map or reactor.  Imports nothing of kdraexp
(:mod:`kdraexp.util` at most).
"""
