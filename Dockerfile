# syntax=docker/dockerfile:1
# kdraexp for linux/amd64, arm64, ppc64le, s390x and riscv64, on Debian 13 (trixie).
#
# Runtime base per platform (the Python in both is Debian 13's python3, 3.13):
#   amd64, arm64            gcr.io/distroless/python3-debian13 (no shell, no package manager)
#   ppc64le, s390x, riscv64 debian:13-slim with python3 only: distroless publishes its python3
#                           image for amd64 and arm64 alone.
# The build stage runs on the target platform (emulated where it is not the builder's), so
# dependencies without a wheel for it (riscv64) are compiled against the same Python: the CEL
# engine of ppc64le, s390x and riscv64 (common-expression-language) is Rust, hence cargo.

ARG DEBIAN_IMAGE=debian:13-slim
ARG DISTROLESS_PYTHON=gcr.io/distroless/python3-debian13:nonroot
# Filled in by BuildKit from the target platform; declared for builders that do not fill it
# (buildah), which are then given it as a build argument.
ARG TARGETARCH

FROM ${DEBIAN_IMAGE} AS build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 python3-pip python3-dev build-essential pkg-config libffi-dev libssl-dev \
        cargo rustc ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY setup.py setup.cfg pyproject.toml README.md LICENSE NOTICE ./
COPY kdraexp ./kdraexp
COPY twisted ./twisted
COPY scripts/install-prefix.sh ./scripts/
# The same script tests/test_image.py runs into a prefix it then makes read-only.
RUN ./scripts/install-prefix.sh /opt/kdraexp
COPY LICENSE NOTICE /licenses/kube-dra-exporter/

FROM ${DISTROLESS_PYTHON} AS runtime-distroless
FROM runtime-distroless AS runtime-amd64
FROM runtime-distroless AS runtime-arm64

FROM ${DEBIAN_IMAGE} AS runtime-debian
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 ca-certificates tzdata \
    && rm -rf /var/lib/apt/lists/*
FROM runtime-debian AS runtime-ppc64le
FROM runtime-debian AS runtime-s390x
FROM runtime-debian AS runtime-riscv64

# hadolint ignore=DL3006
FROM runtime-${TARGETARCH}
COPY --from=build /opt/kdraexp /opt/kdraexp
COPY --from=build /licenses /licenses
ENV PYTHONPATH=/opt/kdraexp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TZ=UTC
USER 65532:65532
EXPOSE 8080 8081
# twistd runs the plugin in the foreground with no pid file (the root is read-only); the plugin
# logs as its --log-level and --log-format say (the chart passes both), JSON by default here.
ENTRYPOINT ["/opt/kdraexp/bin/twistd", "--nodaemon", "--pidfile=", "kdraexp", "--log-format=json"]
