"""kdraexp: a Prometheus exporter for Kubernetes Dynamic Resource Allocation."""

__version__ = "0.2.0"
