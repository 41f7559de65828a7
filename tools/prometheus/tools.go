//go:build tools

// Package tools pins the Prometheus server and promtool the end-to-end tests run.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
