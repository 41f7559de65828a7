"""Makes ``twistd kdraexp`` available; imports nothing but the plugin machinery."""

from twisted.application.service import ServiceMaker

kdraexp = ServiceMaker(
    "kdraexp",
    "kdraexp.app.tap",
    "Prometheus exporter for Kubernetes Dynamic Resource Allocation.",
    "kdraexp",
)
