# syntax=docker/dockerfile:1
# One image, both binaries: `highwater` (dispatch, migrate, events, consumer, ...) and
# `highwater-operator`. No shell, user 65532 (nonroot).
#
#   docker build -t REGISTRY/highwater:VERSION \
#     --build-arg VERSION=VERSION --build-arg REVISION=$(git rev-parse --short HEAD) .
#
# Build arguments:
#   BASE      runtime base image (glibc, CA bundle, user 65532); distroless by default.
#   BUILDER   image of the cargo build stage.
#   BINARIES  `build` compiles the binaries with cargo in the BUILDER stage; `prebuilt` copies
#             them from the build context instead (PREBUILT_DIR/highwater and
#             PREBUILT_DIR/highwater-operator, e.g. after `cargo build --release`); the tests
#             use `prebuilt` with a local BASE (e2e/src/image.rs).
#   VERSION, REVISION, SOURCE  OCI labels; REVISION is also what `--version` prints.
ARG BASE=gcr.io/distroless/cc-debian12:nonroot
ARG BUILDER=docker.io/library/rust:1.94-bookworm
ARG BINARIES=build

FROM ${BUILDER} AS build
ARG REVISION=unknown
WORKDIR /src
COPY . .
# The revision comes from the build argument: the build context has no .git.
RUN HIGHWATER_GIT_REVISION=${REVISION} cargo build --release --locked --bin highwater --bin highwater-operator \
    && mkdir /out \
    && cp target/release/highwater target/release/highwater-operator /out/ \
    && strip /out/highwater /out/highwater-operator

FROM scratch AS prebuilt
ARG PREBUILT_DIR=target/release
COPY ${PREBUILT_DIR}/highwater ${PREBUILT_DIR}/highwater-operator /out/

FROM ${BINARIES} AS binaries

FROM ${BASE}
ARG VERSION=0.4.0
ARG REVISION=unknown
ARG SOURCE=https://example.invalid/highwater
LABEL org.opencontainers.image.title="highwater" \
      org.opencontainers.image.description="Gap-free post-commit event delivery from PostgreSQL: dispatcher and Kubernetes operator" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=binaries /out/highwater /out/highwater-operator /usr/local/bin/
USER 65532:65532
# No entrypoint: the chart names the program (`command: ["highwater"]`, `["highwater-operator"]`).
CMD ["highwater", "--help"]
