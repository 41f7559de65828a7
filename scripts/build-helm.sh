#!/usr/bin/env bash
# helm from the Go module proxy (cached; see go-tool.sh).  The version stamps make
# `helm version` and .Capabilities tell the truth, as helm's own Makefile does; Kubernetes 1.34
# is what the chart targets.  Prints the binary's path on the last line.
set -euo pipefail
version=${HELM_VERSION:-v3.22.0}
pkg=helm.sh/helm/v3
ldflags="-X $pkg/internal/version.version=$version"
ldflags+=" -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=34"
ldflags+=" -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=34"
exec "$(dirname "$0")/go-tool.sh" helm "$pkg/cmd/helm@$version" "$ldflags"
