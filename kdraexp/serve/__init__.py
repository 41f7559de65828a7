"""The HTTP face: the Klein apps, the bounded site and the listeners.

Imports :mod:`kdraexp.sources`, :mod:`kdraexp.exposition`, :mod:`kdraexp.telemetry`,
:mod:`kdraexp.dra` and :mod:`kdraexp.util`; never the client, the store or the families.
"""
