#!/usr/bin/env bash
# Build the Prometheus Operator (cmd/operator) from the Go module proxy, through a wrapper module
# (tools/prometheus-operator: the operator's own go.mod replaces its API and client modules with
# local paths, so `go install ...@version` is refused), into a cache outside the repository keyed
# by version and go.sum, with its CRDs, and reuse them when present.
# Prints the directory holding them on the last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache.sh
. "$here/scripts/cache.sh"
module="$here/tools/prometheus-operator"
operator=github.com/prometheus-operator/prometheus-operator
version=$(awk -v m=$operator '$1 == m {print $2; exit} $2 == m {print $3; exit}' "$module/go.mod")
sum=$(cat "$module/go.sum" "$0" | sha256sum | cut -c1-12)
out="$cache_root/prometheus-operator-$version-$sum"

mkdir -p "$cache_root"
exec 8>"$cache_root/prometheus-operator.lock"
flock 8
if ! cache_hit "$out" operator crds; then
  cache_begin "$out" "prometheus-operator $version"
  cd "$module"
  export GOTOOLCHAIN=auto
  common=github.com/prometheus/common/version
  echo "building prometheus-operator $version ..." >&2
  # No inlining (-l): a third less compiling for a binary that only serves the tests.
  CGO_ENABLED=0 go build -trimpath -gcflags "all=-l" \
    -ldflags "-s -w -X $common.Version=${version#v} -X $common.Revision=$version" \
    -o "$tmp/operator" "$operator/cmd/operator"
  # Its CRDs, from the same module: it waits for an informer of every kind it watches (Probes
  # and ScrapeConfigs too), so all of them.
  mkdir -p "$tmp/crds"
  cp "$(go list -m -f '{{.Dir}}' "$operator")"/example/prometheus-operator-crd/*.yaml "$tmp/crds/"
  cache_commit
fi
echo "$out"
