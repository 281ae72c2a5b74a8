#!/usr/bin/env bash
# Runs every test: unit and integration tests of all crates, the e2e tests against a
# real kube-apiserver + etcd, and the real-node tests (kubelet, containerd, kube-proxy,
# CoreDNS; images built from the Dockerfile). Everything built from Go modules, the
# images and their static binaries are cached under ~/.cache/kubeflake, so only the
# first run on a machine builds them.
#
#   scripts/test.sh                  everything (what CI runs; the node needs root)
#   cargo test --workspace --exclude kubeflake-e2e    only the fast tests, no control plane
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "test.sh: [$((SECONDS / 60))m$((SECONDS % 60))s] $*" >&2; }

step "installing missing Debian packages"
scripts/install-deps.sh
step "building (or finding cached) control-plane and node binaries"
bin_dir=$(e2e/controlplane/build.sh | tail -n 1)
export KUBEFLAKE_BIN_DIR="$bin_dir"
step "building (or finding cached) CoreDNS"
e2e/dns/build.sh >/dev/null
step "building (or finding cached) the linearizability checker (porcupine)"
KUBEFLAKE_LINCHECK=$(e2e/linearizability/build.sh | tail -n 1)
export KUBEFLAKE_LINCHECK
step "building (or finding cached) the images"
e2e/images/build.sh >/dev/null
read -r previous_version previous_commit < <(grep -v '^#' releases.txt | awk 'NF >= 2' | tail -n 1)
step "building (or finding cached) the images of the previous release, $previous_version (e2e/tests/upgrade.rs)"
e2e/images/build.sh --ref "$previous_commit" --tag "$previous_version" >/dev/null

step "checking the chart's alerts and dashboard with promtool"
charts/kubeflake/tests/promtool.sh
step "checking the module graph (no cycles, no source file over 600 lines)"
scripts/check-modules.py
step "checking the rendered chart (every values variant) and the Dockerfile with checkov"
charts/kubeflake/tests/checkov.sh

step "running cargo test"
cargo test --workspace --locked --no-fail-fast "$@"
step "checking the sidecar's HTTP API against docs/openapi.yaml (Schemathesis)"
scripts/check-openapi.sh
step "running cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "checking the dependencies' licenses, versions and sources against deny.toml (cargo deny)"
scripts/check-deps.sh
step "done"
