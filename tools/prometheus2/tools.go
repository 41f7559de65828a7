//go:build tools

// Package tools pins the Prometheus 2 the node tier runs, with Kubernetes service discovery:
// 2.42, Debian bookworm's release, whose package is built without it.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
