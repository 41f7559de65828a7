//go:build tools

// Package tools pins the node the node tier runs: the kubelet, kube-proxy and Kubernetes' own
// DRA test driver, all of the Kubernetes release the control plane runs.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/e2e/dra/test-driver"
)
