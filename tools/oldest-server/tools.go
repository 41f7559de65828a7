//go:build tools

// Package tools pins the oldest kube-apiserver the exporter supports, for the end-to-end tests
// of version negotiation (etcd is the one tools/control-plane builds).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
