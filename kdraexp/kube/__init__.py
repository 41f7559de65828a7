"""The Kubernetes API client: kubeconfig, credentials, exec plugins, TLS and a bounded transport.

Imports :mod:`kdraexp.dra` and :mod:`kdraexp.util`; nothing that stores, serves or renders.
Only the app wires it to a source.
"""
