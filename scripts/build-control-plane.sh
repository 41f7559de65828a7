#!/usr/bin/env bash
# Build kube-apiserver, etcd, kube-scheduler and kube-controller-manager for the end-to-end and
# simulated-cluster tests from the Go module proxy, and fetch
# the ServiceMonitor, PodMonitor and PrometheusRule CRDs from the prometheus-operator module,
# into a cache outside the repository keyed by version, and reuse it when present.
# Prints the directory holding them on the last line of stdout.
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

# One build at a time: `make test` begins one early, and the tests' call then waits for it.
mkdir -p "$cache_root"
exec 9>"$cache_root/control-plane.lock"
flock 9
if cache_hit "$out" kube-apiserver etcd kube-scheduler kube-controller-manager crds; then
  echo "$out"
  exit 0
fi
cache_begin "$out" "the control plane"
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
# No inlining (-l): a third less compiling for binaries that only serve the tests.
gcflags="all=-l"
cd "$module"
echo "building kube-apiserver $k8s_version ..." >&2
CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "building etcd $etcd_version ..." >&2
CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
for command in kube-scheduler kube-controller-manager; do
  echo "building $command $k8s_version ..." >&2
  CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/$command" "k8s.io/kubernetes/cmd/$command"
done
echo "fetching prometheus-operator $operator_version CRDs ..." >&2
operator_dir=$(go mod download -json "github.com/prometheus-operator/prometheus-operator@$operator_version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
mkdir -p "$tmp/crds"
for kind in servicemonitors podmonitors prometheusrules; do
  cp "$operator_dir/example/prometheus-operator-crd/monitoring.coreos.com_$kind.yaml" "$tmp/crds/"
done
cache_commit
echo "$out"
