"""End-to-end tests against a real kube-apiserver, etcd, helm and Prometheus."""
