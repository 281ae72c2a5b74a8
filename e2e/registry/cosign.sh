#!/usr/bin/env bash
# Prints the path of cosign (Sigstore's signing tool), built once from its Go module into
# the cache by scripts/lib/release-tools.sh. The registry e2e (e2e/tests/registry_install.rs)
# signs its release with a throw-away key, attaches the image signatures in the node's
# registry and verifies them there, as docs/install.md ("Verifying a release") tells a user;
# scripts/test.sh starts this script in the background when the lanes start, so that the
# first build (about 10 minutes of CPU) overlaps the [node] lane's waits.
#
#   e2e/registry/cosign.sh     progress on stderr; the LAST stdout line is the path
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { echo "cosign.sh: $*" >&2; }
command -v go >/dev/null || {
	log "needs Go to build cosign (the same Go that builds the control plane, e2e/README.md)"
	exit 1
}
# shellcheck source=../../scripts/lib/release-tools.sh
source "$repo/scripts/lib/release-tools.sh"
tool_cosign
