//go:build tools

// Package tools pins the container runtime the node tier runs: containerd 2 (the kubelet of
// 1.37 refuses 1.x, and CDI, which DRA drivers use, needs 2.x), its runc shim and ctr.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
