//go:build tools

// Package tools pins the Prometheus Operator the end-to-end tests run.
package tools

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
)
