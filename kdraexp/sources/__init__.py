"""Where collections come from: the list gatherer, the watch gatherer and the file source.

Imports :mod:`kdraexp.store`, :mod:`kdraexp.families`, :mod:`kdraexp.telemetry`,
:mod:`kdraexp.cel`, :mod:`kdraexp.dra` and :mod:`kdraexp.util`. Never the Kubernetes client: a
source sees the API through the protocols of :mod:`kdraexp.dra.listing`.
"""
