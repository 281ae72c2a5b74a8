#!/usr/bin/env bash
# Runs every test: unit and integration tests of all crates, and the e2e tests against a
# real kube-apiserver + etcd built from Go modules (cached under ~/.cache/kubeflake, so
# only the first run on a machine builds them).
#
#   scripts/test.sh                  everything (what CI runs)
#   cargo test --workspace --exclude kubeflake-e2e    only the fast tests, no control plane
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
echo "test.sh: building (or finding cached) control-plane binaries" >&2
bin_dir=$(e2e/controlplane/build.sh | tail -n 1)
export KUBEFLAKE_BIN_DIR="$bin_dir"

cargo test --workspace --locked --no-fail-fast "$@"
