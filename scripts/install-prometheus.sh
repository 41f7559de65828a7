#!/usr/bin/env bash
# Make sure Prometheus and promtool are installed, from Debian's `prometheus` package.
# Prints the directory holding them on the last line of stdout.
set -euo pipefail
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  echo "installing Debian's prometheus package ..." >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >&2
fi
dirname "$(command -v prometheus)"
