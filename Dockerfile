# syntax=docker/dockerfile:1
# Images of kubeflake, from one build of the workspace:
#
#   docker build --target operator    -t <your-registry>/kubeflake/operator:0.2.0 .
#   docker build --target sidecar     -t <your-registry>/kubeflake/sidecar:0.2.0 .
#   docker build --target example-app -t <your-registry>/kubeflake/example-app:0.2.0 .
#
# Static binaries on an empty base: no shell, no package manager, nothing to patch but
# the binary. Runs as a numeric non-root user, so the pod's runAsNonRoot check works
# without a passwd file. The images are not published; see docs/install.md.
#
# This file is the only description of the images. The binaries come from one of two
# stages, chosen with --build-arg BINARIES:
#   build     (default) compiles them here, static on musl;
#   prebuilt  takes them from the build context instead: a directory holding
#             kubeflake-operator, kubeflake-sidecar, kubeflake-example-app (static) and
#             ca-certificates.crt. e2e/images/build.sh builds the test node's images so,
#             with buildah, where no base image can be pulled.
ARG BINARIES=build

# Build stage: the workspace's minimum Rust version, on musl.
FROM rust:1.89-alpine3.22 AS build
# musl-dev: the C runtime that ring's assembly links against; ca-certificates: copied
# into the runtime images for HTTPS clients that read the system roots. Not pinned: the
# base image tag pins the Alpine release, whose repositories carry one version of each.
# hadolint ignore=DL3018
RUN apk add --no-cache musl-dev ca-certificates
WORKDIR /src
# Every workspace member (Cargo.toml `members`), even those not built here: cargo loads
# the whole workspace before it builds two packages of it. A test checks this list and
# .dockerignore against the members (operator/tests/docker_build_context.rs).
COPY Cargo.toml Cargo.lock ./
COPY crds crds
COPY runtime runtime
COPY sidecar sidecar
COPY operator operator
COPY e2e e2e
COPY kubectl-kubeflake kubectl-kubeflake
COPY bench bench
COPY examples examples
RUN cargo build --release --locked -p kubeflake-operator -p kubeflake-sidecar -p kubeflake-example-app \
 && mkdir /out \
 && cp target/release/kubeflake-operator target/release/kubeflake-sidecar \
       target/release/kubeflake-example-app /etc/ssl/certs/ca-certificates.crt /out/

# Binaries built outside (see the top of this file); the build context is their directory.
FROM scratch AS prebuilt
COPY kubeflake-operator kubeflake-sidecar kubeflake-example-app ca-certificates.crt /out/

FROM ${BINARIES} AS binaries

# Shared runtime base: nothing but CA roots and a non-root user id.
FROM scratch AS runtime
COPY --from=binaries /out/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65532:65532

# The example application (examples/app): asks its sidecar for IDs over $KUBEFLAKE_URL.
FROM runtime AS example-app
COPY --from=binaries /out/kubeflake-example-app /kubeflake-example-app
EXPOSE 8080
ENTRYPOINT ["/kubeflake-example-app"]

FROM runtime AS operator
COPY --from=binaries /out/kubeflake-operator /kubeflake-operator
EXPOSE 8080 9443
ENTRYPOINT ["/kubeflake-operator"]

# Listed last so that a plain `docker build .` gives the sidecar.
FROM runtime AS sidecar
COPY --from=binaries /out/kubeflake-sidecar /kubeflake-sidecar
EXPOSE 7070 7071
ENTRYPOINT ["/kubeflake-sidecar"]
