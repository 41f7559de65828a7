#!/usr/bin/env bash
# Build kube-apiserver, etcd, kube-scheduler and kube-controller-manager for the end-to-end and
# simulated-cluster tests from the Go module proxy, with publish-slices (tools/control-plane:
# slices published by the controller DRA drivers use), and fetch
# the ServiceMonitor, PodMonitor and PrometheusRule CRDs from the prometheus-operator module,
# into a cache outside the repository keyed by version, and reuse it when present.
# Prints the directory holding them on the last line of stdout.
#
#   scripts/build-control-plane.sh [core]   core: kube-apiserver, etcd and the CRDs only
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache.sh
. "$here/scripts/cache.sh"
module="$here/tools/control-plane"
k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$module/go.mod")
etcd_version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2; exit}' "$module/go.mod")
operator_version=v0.90.1
sum=$(cat "$module/go.sum" "$0" | sha256sum | cut -c1-12)
out="$cache_root/control-plane-$k8s_version-etcd-$etcd_version-$sum"
# publish-slices is the project's own source: its hash names a stamp beside it, so a changed
# publisher is rebuilt alone (a relink) instead of the whole control plane.
publisher_sum=$(cat "$module"/publish-slices/*.go | sha256sum | cut -c1-12)

# Two stages, one build of each at a time: kube-apiserver, etcd and the CRDs first (most of the
# end-to-end tests need nothing else), then kube-scheduler, kube-controller-manager and
# publish-slices (the simulated cluster's). `make test` begins both early; the tests' calls then
# wait for the stage they need. With `core`, only the first stage is built.
mkdir -p "$cache_root"
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
# No inlining (-l): a third less compiling for binaries that only serve the tests.
gcflags="all=-l"

exec 8>"$cache_root/control-plane-core.lock"
flock 8
if ! cache_hit "$out" kube-apiserver etcd crds; then
  cache_begin "$out" "kube-apiserver, etcd and the CRDs"
  cd "$module"
  echo "building kube-apiserver $k8s_version ..." >&2
  CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  echo "building etcd $etcd_version ..." >&2
  CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  echo "fetching prometheus-operator $operator_version CRDs ..." >&2
  operator_dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$operator_version" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$tmp/crds"
  for kind in servicemonitors podmonitors prometheusrules; do
    cp "$operator_dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$tmp/crds/"
  done
  cache_commit
fi
exec 8>&-
if [ "${1:-}" = core ]; then
  echo "$out"
  exit 0
fi

exec 9>"$cache_root/control-plane-scheduler.lock"
flock 9
if ! cache_hit "$out" kube-scheduler kube-controller-manager "publish-slices.$publisher_sum"; then
  cache_begin "$out" "kube-scheduler, kube-controller-manager and publish-slices"
  cd "$module"
  for command in kube-scheduler kube-controller-manager; do
    [ -e "$out/$command" ] && continue
    echo "building $command $k8s_version ..." >&2
    CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/$command" "k8s.io/kubernetes/cmd/$command"
  done
  echo "building publish-slices ..." >&2
  CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/publish-slices" ./publish-slices
  rm -f "$out"/publish-slices.*
  touch "$tmp/publish-slices.$publisher_sum"
  cache_add
fi
echo "$out"
