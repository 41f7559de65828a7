"""The DRA model: wire structs, the list contract, gated fields, quantities and CEL.

Pure and synchronous. Imports only :mod:`kdraexp.util`.
"""
