#!/usr/bin/env bash
# Build the image from the Dockerfile as it ships, for the node tier, with podman, into a cache
# outside the repository keyed by what the Dockerfile copies, and reuse it when present; with the
# pod sandbox's pause image. Needs root (and installs its Debian packages: install-node-packages.sh).
#
# No image registry is reachable, so the Dockerfile's two bases are stand-ins made here from
# Debian's packages with mmdebstrap, under the names the Dockerfile pulls: debian:13-slim (minbase,
# trusting what this host trusts, so that the build stage reaches PyPI through an intercepting
# proxy too) and gcr.io/distroless/python3-debian13:nonroot (minbase with python3,
# ca-certificates and tzdata, and the nonroot user 65532). They are cached by this script's hash
# and the host's trust store.
#
# Writes kdraexp.tar (the image, tagged as the chart's default image, so that a `helm install`
# without image values runs it) and pause.tar (registry.k8s.io/pause) as docker archives; prints
# the directory holding them on the last line of stdout.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/cache.sh
. "$here/scripts/cache.sh"
binaries=$(bash "$here/scripts/build-node.sh" | tail -1)

suite=trixie
mirror=http://deb.debian.org/debian
trust=/etc/ssl/certs/ca-certificates.crt
app_version=$(awk '$1 == "appVersion:" {gsub(/"/, "", $2); print $2}' "$here/chart/kube-dra-exporter/Chart.yaml")
image="ghcr.io/gradiant/kube-dra-exporter:$app_version"
pause_image=registry.k8s.io/pause:3.10.1
arch=$(dpkg --print-architecture)

bases_sum=$(cat "$0" "$trust" | sha256sum | cut -c1-12)
bases="$cache_root/node-bases-$suite-$bases_sum"
# What the Dockerfile copies from the context, each file's content: the image changes with them.
sources=$(awk '$1 == "COPY" && $2 !~ /^--/ {for (i = 2; i < NF; i++) print $i}' "$here/Dockerfile" | sort -u)
context_sum=$(cd "$here" && find $sources -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 \
  | sort -z | xargs -0 sha256sum | cat - Dockerfile "$0" "$binaries/pause" | sha256sum | cut -c1-12)
out="$cache_root/node-image-$app_version-$arch-$bases_sum-$context_sum"

mkdir -p "$cache_root"
exec 8>"$cache_root/node-image.lock"
flock 8
# The node's runtime packages too: once this stage is done the node tier has all it needs.
bash "$here/scripts/install-node-packages.sh"
if cache_hit "$out" kdraexp.tar pause.tar; then
  echo "$out"
  exit 0
fi

# podman with its own configuration and storage, both in the cache: runc (crun refuses hybrid
# cgroups), cgroupfs, no event log, limits the sandbox can grant (CAP_SYS_RESOURCE is missing).
podman_dir="$cache_root/podman"
run_dir=$(mktemp -d /tmp/kdraexp-podman.XXXXXX)
mkdir -p "$podman_dir/storage"
cat >"$podman_dir/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "none"
EOF
cat >"$podman_dir/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$podman_dir/storage"
runroot = "$run_dir"
EOF
export CONTAINERS_CONF="$podman_dir/containers.conf" CONTAINERS_STORAGE_CONF="$podman_dir/storage.conf"
release_storage() {
  # podman leaves its storage's overlay directory mounted on itself, and its run directory.
  podman image prune -f >/dev/null 2>&1 || true
  while mountpoint -q "$podman_dir/storage/overlay"; do umount "$podman_dir/storage/overlay"; done
  rm -rf "$run_dir"
}

cache_begin "$out" "the kdraexp image"
trap 'release_storage; rm -rf "$tmp"' EXIT

if ! cache_hit "$bases" debian.tar distroless.tar; then
  mkdir -p "$bases.tmp"
  echo "making the stand-in debian:13-slim ($suite minbase) ..." >&2
  # The host's trust store as a local certificate: the build stage's ca-certificates adds it.
  mmdebstrap --quiet --variant=minbase \
    --customize-hook="mkdir -p \"\$1/usr/local/share/ca-certificates\"" \
    --customize-hook="cp $trust \"\$1/usr/local/share/ca-certificates/host.crt\"" \
    "$suite" "$bases.tmp/debian.tar" "$mirror" >&2
  echo "making the stand-in distroless python3 ($suite) ..." >&2
  mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates,tzdata \
    --customize-hook="echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >>\"\$1/etc/passwd\"" \
    --customize-hook="echo 'nonroot:x:65532:' >>\"\$1/etc/group\"" \
    --customize-hook="mkdir -p -m 700 \"\$1/home/nonroot\" && chown 65532:65532 \"\$1/home/nonroot\"" \
    "$suite" "$bases.tmp/distroless.tar" "$mirror" >&2
  rm -rf "$bases"
  mv "$bases.tmp" "$bases"
fi
podman import --quiet --change 'CMD ["bash"]' "$bases/debian.tar" docker.io/library/debian:13-slim >/dev/null
podman import --quiet --change 'USER 65532:65532' "$bases/distroless.tar" \
  gcr.io/distroless/python3-debian13:nonroot >/dev/null

echo "building $image from the Dockerfile ..." >&2
# buildah does not fill TARGETARCH as BuildKit does: it is given. The host's network: no bridge,
# no NAT rule, no forwarding to set up for the build's apt and pip.
podman build --quiet --pull=never --network=host --build-arg "TARGETARCH=$arch" \
  --tag "$image" --file "$here/Dockerfile" "$here" >/dev/null
podman save --quiet --format docker-archive --output "$tmp/kdraexp.tar" "$image"

tar -C "$binaries" -c pause | podman import --quiet --change 'ENTRYPOINT ["/pause"]' - "$pause_image" >/dev/null
podman save --quiet --format docker-archive --output "$tmp/pause.tar" "$pause_image"
cache_commit
release_storage
# Each change of the source makes an image of 290 MB: keep the three built last.
find "$cache_root" -maxdepth 1 -type d -name 'node-image-*' -printf '%T@ %p\n' | sort -rn \
  | tail -n +4 | cut -d' ' -f2- | xargs -r rm -rf
echo "$out"
