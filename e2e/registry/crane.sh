#!/usr/bin/env bash
# Prints the path of crane (go-containerregistry), built once from its Go module into the
# cache by scripts/lib/release-tools.sh: `crane registry serve` is a small OCI registry
# (on the node's bridge it is the test registry, 10.244.0.1:5000, which e2e/node/node.sh
# counts among the node's processes) and `crane push` pushes a release's archives to it.
#
#   e2e/registry/crane.sh     progress on stderr; the LAST stdout line is the path
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { echo "crane.sh: $*" >&2; }
command -v go >/dev/null || {
	log "needs Go to build crane (the same Go that builds the control plane, e2e/README.md)"
	exit 1
}
# shellcheck source=../../scripts/lib/release-tools.sh
source "$repo/scripts/lib/release-tools.sh"
tool_crane
