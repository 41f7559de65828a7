#!/usr/bin/env bash
# Install a Go command from the Go module proxy into a cache outside the repository, keyed by
# name and version, and reuse it when present.  Prints the binary's path on the last line.
#
#   scripts/go-tool.sh helm        helm.sh/helm/v3/cmd/helm@v3.22.0 [LDFLAGS]
#   scripts/go-tool.sh actionlint  github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
set -euo pipefail

# shellcheck source=scripts/cache.sh
. "$(dirname "$0")/cache.sh"
name=$1 package=$2 ldflags=${3:-}
version=${package##*@}
out="$cache_root/$name-$version"

if ! cache_hit "$out" "$name"; then
  cache_beside=1  # a quick build, which the tests wait for as they start
  cache_begin "$out" "$name $version"
  echo "building $name $version ..." >&2
  # No inlining (-l): a third less compiling for a tool only the tests run.
  GOBIN="$tmp" CGO_ENABLED=0 go install -trimpath -gcflags "all=-l" -ldflags "-s -w $ldflags" "$package"
  cache_commit
fi
echo "$out/$name"
