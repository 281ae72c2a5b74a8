#!/usr/bin/env bash
# Builds kubeflake-lincheck, the porcupine linearizability checker of the e2e test
# tests/linearizability.rs, from this Go module (main.go; porcupine pinned in go.mod).
#
# The binary goes to a cache outside the repository:
#   ${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/bin/lincheck-<hash>/kubeflake-lincheck
# where <hash> covers go.mod, go.sum, the Go sources, this script, e2e/lib/go-build.sh
# and the Go version,
# so it is rebuilt only when one of them changes; a warm run is a no-op.
#
# Output contract: the binary's path is the LAST line on stdout; all progress goes to
# stderr (as e2e/dns/build.sh).
#
# Environment:
#   KUBEFLAKE_CACHE   cache root (default ~/.cache/kubeflake)
#   GO                go command (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

log() { echo "build.sh (lincheck): $*" >&2; }
# shellcheck source=../lib/go-build.sh
source ../lib/go-build.sh
go_find

cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
bin_dir="$cache_root/bin/lincheck-$(go_cache_key go.mod go.sum build.sh ./*.go)"
bin="$bin_dir/kubeflake-lincheck"

if [[ -x "$bin" ]]; then
	echo "$bin"
	exit 0
fi

go_lock "$bin_dir"

if [[ ! -x "$bin" ]]; then
	go_build_env

	tmp=$(mktemp -d "$bin_dir.tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	log "building kubeflake-lincheck into $bin_dir"
	start=$SECONDS
	nice -n 10 "$go" build -trimpath -ldflags "-s -w" -o "$tmp/kubeflake-lincheck" .
	mv -f "$tmp/kubeflake-lincheck" "$bin"
	log "built in $((SECONDS - start))s"
fi

echo "$bin"
