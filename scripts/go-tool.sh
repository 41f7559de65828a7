#!/usr/bin/env bash
# Install a Go command from the Go module proxy into a cache outside the repository, keyed by
# name and version, and reuse it when present.  Prints the binary's path on the last line.
#
#   scripts/go-tool.sh helm        helm.sh/helm/v3/cmd/helm@v3.22.0 [LDFLAGS]
#   scripts/go-tool.sh actionlint  github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
set -euo pipefail

name=$1 package=$2 ldflags=${3:-}
version=${package##*@}
cache_root=${KDRAEXP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdraexp}
out="$cache_root/$name-$version"

if [ -x "$out/$name" ]; then
  echo "$name $version: cached" >&2
  echo "$out/$name"
  exit 0
fi
command -v go >/dev/null || { echo "go is not installed: cannot build $name" >&2; exit 1; }

start=$(date +%s)
tmp="$out.tmp.$$"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo "building $name $version ..." >&2
GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w $ldflags" "$package"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$name built in $(( $(date +%s) - start ))s" >&2
echo "$out/$name"
