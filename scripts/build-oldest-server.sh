#!/usr/bin/env bash
# Build the oldest kube-apiserver the exporter supports (tools/oldest-server pins its version)
# from the Go module proxy, for the end-to-end tests of version negotiation, into a cache
# outside the repository keyed by version, and reuse it when present. etcd is the one
# scripts/build-control-plane.sh builds. Prints the directory holding it on the last line.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache.sh
. "$here/scripts/cache.sh"
module="$here/tools/oldest-server"
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit} $1 == "k8s.io/kubernetes" {print $2; exit}' "$module/go.mod")
sum=$(cat "$module/go.sum" "$0" | sha256sum | cut -c1-12)
out="$cache_root/kube-apiserver-$k8s_version-$sum"

mkdir -p "$cache_root"
exec 8>"$cache_root/oldest-server.lock"
flock 8
if ! cache_hit "$out" kube-apiserver; then
  cache_begin "$out" "kube-apiserver $k8s_version"
  minor=${k8s_version#v1.}; minor=${minor%%.*}
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  cd "$module"
  echo "building kube-apiserver $k8s_version ..." >&2
  # No inlining (-l): a third less compiling for a binary that only serves the tests.
  CGO_ENABLED=0 go build -trimpath -gcflags "all=-l" -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  cache_commit
fi
echo "$out"
