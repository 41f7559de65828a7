"""DeviceClass and claim selectors evaluated: matched, cached and budgeted, in a process of its own.

The evaluation process (:mod:`kdraexp.cel.process`, :mod:`kdraexp.cel.worker`) bounds each
evaluation in time and memory; the Kubernetes CEL environment (:mod:`kdraexp.cel.runtime`, or
:mod:`kdraexp.cel.rust`) is loaded in that process only, started when an expression first needs
it: one that compares the driver and attributes with literals is evaluated here
(:mod:`kdraexp.cel.native`).  Synchronous: a matcher is called from
the lists' threads and guards itself.  Imports :mod:`kdraexp.dra` and :mod:`kdraexp.util`.
"""
