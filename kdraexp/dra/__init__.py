"""The DRA model: wire structs, the list contract, gated fields, quantities and CEL.

Synchronous; CEL is evaluated in a bounded process of its own (:mod:`kdraexp.dra.celprocess`).
Imports only :mod:`kdraexp.util`.
"""
