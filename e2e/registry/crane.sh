#!/usr/bin/env bash
# Prints the path of crane (go-containerregistry), built once from its Go module into the
# cache by scripts/lib/release-tools.sh. The registry e2e (e2e/src/registry.rs) runs it
# twice: `crane registry serve` is the node's OCI registry, `crane push` pushes the
# release's archives to it (docs/install.md, "Into a registry", gives the same commands).
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
