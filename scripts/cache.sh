# shellcheck shell=bash
# Building into the cache outside the repository; sourced by the build scripts.
#   cache_hit DIR FILE...   true when every FILE is already in DIR
#   cache_begin DIR WHAT    check for Go, wait for the slow build in progress, and make "$tmp"
#                           to build into (removed on failure); with cache_beside set, do not wait
#   cache_commit            move "$tmp" to DIR and say how long the build took
#   cache_add               move each file of "$tmp" into DIR (which exists), as cache_commit
cache_root=${KDRAEXP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kdraexp}

cache_hit() {
  local dir=$1 file
  shift
  for file in "$@"; do
    [ -e "$dir/$file" ] || return 1
  done
  echo "$(basename "$dir"): cached" >&2
}

cache_begin() {
  cache_dir=$1 cache_what=$2
  command -v go >/dev/null || { echo "go is not installed: cannot build $cache_what" >&2; exit 1; }
  # One slow build at a time, whoever asks for it: make prebuild, the tests, and the node tier's
  # tests beside them each ask for theirs, in their order. Quick tools (go-tool.sh's) are built
  # beside them: the tests wait for those as they start.
  if [ -z "${cache_beside:-}" ]; then
    exec 7>"$cache_root/slow-build.lock"
    flock 7
  fi
  cache_start=$(date +%s)
  # Below the tests that run meanwhile: they are what waits on a person, and some (a burst of
  # 2,000 clients) measure a server that must not be starved by a compiler.
  renice -n 10 -p $$ >/dev/null 2>&1 || true
  # The compiler collects its garbage a quarter as often: a sixth less CPU, a little more memory.
  export GOGC=${GOGC:-400}
  tmp="$cache_dir.tmp.$$"
  mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
}

cache_commit() {
  rm -rf "$cache_dir"
  mv "$tmp" "$cache_dir"
  _cache_built
}

cache_add() {
  local file
  for file in "$tmp"/*; do
    mv "$file" "$cache_dir/"
  done
  rm -rf "$tmp"
  _cache_built
}

_cache_built() {
  trap - EXIT
  if [ -z "${cache_beside:-}" ]; then
    exec 7>&-
  fi
  echo "$cache_what built in $(( $(date +%s) - cache_start ))s" >&2
}
