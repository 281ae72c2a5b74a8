#!/usr/bin/env bash
# Builds kubeflake-lincheck, the porcupine linearizability checker of the e2e test
# tests/linearizability.rs, from this Go module (main.go; porcupine pinned in go.mod).
#
# The binary goes to a cache outside the repository:
#   ${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/bin/lincheck-<hash>/kubeflake-lincheck
# where <hash> covers go.mod, go.sum, the Go sources, this script and the Go version,
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

go=${GO:-go}
if ! command -v "$go" >/dev/null 2>&1; then go=/usr/local/go/bin/go; fi
if ! command -v "$go" >/dev/null 2>&1; then
	log "no Go toolchain found (set GO=/path/to/go)"
	exit 1
fi

cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
go_version=$("$go" env GOVERSION)
hash=$({
	cat go.mod go.sum build.sh
	for f in *.go; do
		echo "== $f"
		cat "$f"
	done
	echo "$go_version $("$go" env GOOS GOARCH)"
} | sha256sum | cut -c1-16)
bin_dir="$cache_root/bin/lincheck-$hash"
bin="$bin_dir/kubeflake-lincheck"

if [[ -x "$bin" ]]; then
	echo "$bin"
	exit 0
fi

mkdir -p "$bin_dir"
# Several test binaries (or a person and a test) may call us at once: one builds, the
# others wait and then find the binary present.
exec 9>"$bin_dir.lock"
flock 9

if [[ ! -x "$bin" ]]; then
	# Go's caches under the same root as e2e/controlplane/build.sh.
	export GOCACHE="$cache_root/go/build"
	export GOMODCACHE="$cache_root/go/mod"
	export GOFLAGS=-mod=readonly
	export GOTOOLCHAIN=local
	export CGO_ENABLED=0

	tmp=$(mktemp -d "$bin_dir.tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	log "building kubeflake-lincheck into $bin_dir"
	start=$SECONDS
	nice -n 10 "$go" build -trimpath -ldflags "-s -w" -o "$tmp/kubeflake-lincheck" .
	mv -f "$tmp/kubeflake-lincheck" "$bin"
	log "built in $((SECONDS - start))s"
fi

echo "$bin"
