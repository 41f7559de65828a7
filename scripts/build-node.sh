#!/usr/bin/env bash
# Build the node the node tier runs, from the Go module proxy, into a cache outside the
# repository keyed by version, and reuse it when present: the kubelet, kube-proxy and Kubernetes'
# own DRA test driver (tools/node: the control plane's release and dependencies, built with
# scripts/build-control-plane.sh's flags, so the Go build cache that build filled serves this
# one), containerd 2 with its runc shim and ctr (tools/containerd), and the pod sandbox's pause
# (tools/node/pause). Prints the directory holding them on the last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache.sh
. "$here/scripts/cache.sh"
node="$here/tools/node"
runtime="$here/tools/containerd"
k8s_version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit} $1 == "k8s.io/kubernetes" {print $2; exit}' "$node/go.mod")
containerd=github.com/containerd/containerd/v2
containerd_version=$(awk -v m=$containerd '$1 == "require" && $2 == m {print $3; exit} $1 == m {print $2; exit}' "$runtime/go.mod")
sum=$(cat "$node/go.sum" "$runtime/go.sum" "$node/pause/main.go" "$0" | sha256sum | cut -c1-12)
out="$cache_root/node-$k8s_version-containerd-$containerd_version-$sum"

mkdir -p "$cache_root"
exec 8>"$cache_root/node.lock"
flock 8
if ! cache_hit "$out" kubelet kube-proxy dra-test-driver pause containerd containerd-shim-runc-v2 ctr; then
  cache_begin "$out" "kubelet, kube-proxy, the DRA test driver, pause and containerd"
  minor=${k8s_version#v1.}; minor=${minor%%.*}
  # As scripts/build-control-plane.sh builds: the same flags, so the same compiled packages.
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  gcflags="all=-l"
  cd "$node"
  for command in kubelet kube-proxy; do
    echo "building $command $k8s_version ..." >&2
    CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/$command" "k8s.io/kubernetes/cmd/$command"
  done
  echo "building the DRA test driver $k8s_version ..." >&2
  CGO_ENABLED=0 go build -trimpath -gcflags "$gcflags" -ldflags "$ldflags" -o "$tmp/dra-test-driver" k8s.io/kubernetes/test/e2e/dra/test-driver
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/pause" ./pause
  cd "$runtime"
  # Without the snapshotters that need C libraries or kernel features this node does not use;
  # the version stamped as containerd's own release does, for the kubelet to read.
  tags=no_btrfs,no_devmapper,no_zfs
  version_ldflags="-s -w -X $containerd/version.Version=${containerd_version#v} -X $containerd/version.Revision=$containerd_version"
  for command in containerd containerd-shim-runc-v2 ctr; do
    echo "building $command $containerd_version ..." >&2
    CGO_ENABLED=0 go build -trimpath -tags "$tags" -gcflags "$gcflags" -ldflags "$version_ldflags" -o "$tmp/$command" "$containerd/cmd/$command"
  done
  cache_commit
fi
echo "$out"
