#!/usr/bin/env bash
# Build Prometheus 3 (the server and promtool) from the Go module proxy, with Kubernetes service
# discovery only (kube-prometheus-stack's Prometheus finds its targets that way; file and HTTP
# discovery are always in), into a cache outside the repository keyed by version and go.sum, and
# reuse it when present. The version Prometheus reports is set as its own release does.
# Prints the directory holding them on the last line of stdout.
#
#   scripts/build-prometheus.sh [MODULE]   another wrapper module than tools/prometheus:
#                                          tools/prometheus2 (2.42, every discovery: 2.x builds
#                                          them all), for the node tier
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache.sh
. "$here/scripts/cache.sh"
module="$here/${1:-tools/prometheus}"
# v0.316.0 is Prometheus 3.16.0 (the Go module's versions are 0.<major><minor>.<patch> from 3.0
# on), v0.42.0 is 2.42.0 (0.<minor>.<patch> before).
module_version=$(awk -v m=github.com/prometheus/prometheus '$1 == m {print $2; exit} $2 == m {print $3; exit}' "$module/go.mod")
numbers=${module_version#v0.}
minor=${numbers%%.*}
if [ ${#minor} -ge 3 ]; then
  version="${minor:0:1}.$((10#${minor:1})).${numbers#*.}"
else
  version="2.$minor.${numbers#*.}"
fi
sum=$(cat "$module/go.sum" "$0" | sha256sum | cut -c1-12)
out="$cache_root/prometheus-$version-$sum"

mkdir -p "$cache_root"
exec 8>"$cache_root/prometheus.lock"
flock 8
if ! cache_hit "$out" prometheus promtool; then
  cache_begin "$out" "Prometheus $version and promtool"
  cd "$module"
  # A go.mod asking for a newer Go than the one installed: fetch that toolchain from the module
  # proxy rather than fail (an installed Go as new or newer is used as it is).
  export GOTOOLCHAIN=auto
  common=github.com/prometheus/common/version
  ldflags="-s -w -X $common.Version=$version -X $common.Revision=$module_version"
  ldflags+=" -X $common.Branch=HEAD -X $common.BuildUser=kdraexp"
  ldflags+=" -X $common.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
  for command in prometheus promtool; do
    echo "building $command $version ..." >&2
    # No inlining (-l): a third less compiling for binaries that only serve the tests.
    CGO_ENABLED=0 go build -trimpath -tags remove_all_sd,enable_kubernetes_sd -gcflags "all=-l" \
      -ldflags "$ldflags" -o "$tmp/$command" "github.com/prometheus/prometheus/cmd/$command"
  done
  "$tmp/prometheus" --version | head -1 >&2
  cache_commit
fi
echo "$out"
