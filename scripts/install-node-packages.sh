#!/usr/bin/env bash
# Make sure the Debian packages the node tier needs are installed, with apt when one is missing:
# runc (containerd's runtime), the CNI plugins (the pods' bridge), iptables (kube-proxy's
# Services), conntrack (kube-proxy clears stale UDP flows with it), podman (builds the image from
# the Dockerfile) and mmdebstrap (the image's stand-in bases). Needs root.
set -euo pipefail
packages=(runc containernetworking-plugins iptables nftables conntrack podman mmdebstrap)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} ..." >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
