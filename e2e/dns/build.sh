#!/usr/bin/env bash
# Builds CoreDNS, the cluster DNS server of the kubeflake e2e test cluster,
# from its Go module (github.com/coredns/coredns, with the default plugin set
# that its core/plugin/zplugin.go compiles in).
#
# The binary goes to a cache outside the repository:
#   ${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/bin/coredns-<hash>/coredns
# where <hash> covers versions.env, go.mod, go.sum, this script,
# e2e/lib/go-build.sh and the Go version, so changing any pin builds into a fresh directory. It is built only
# when missing, so a warm run is a no-op that takes well under a second.
#
# Output contract: the bin directory is the LAST line on stdout; all progress
# goes to stderr (as e2e/controlplane/build.sh).
#
# Environment:
#   KUBEFLAKE_CACHE        cache root (default ~/.cache/kubeflake)
#   KUBEFLAKE_BUILD_JOBS   parallel package builds, go build -p (default 2)
#   GO                     go command (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
# shellcheck source=versions.env
source ./versions.env

log() { echo "build.sh (dns): $*" >&2; }
# shellcheck source=../lib/go-build.sh
source ../lib/go-build.sh
go_find

# go.mod is generated from versions.env by update.sh; refuse to build a
# mixture of the two.
pin="require github.com/coredns/coredns ${COREDNS_VERSION}"
if ! grep -qxF "${pin}" go.mod; then
	log "go.mod does not match versions.env (missing '${pin}'); run ./update.sh"
	exit 1
fi

cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
bin_dir="$cache_root/bin/coredns-$(go_cache_key versions.env go.mod go.sum build.sh)"

if [[ -x "$bin_dir/coredns" ]]; then
	echo "$bin_dir"
	exit 0
fi

go_lock "$bin_dir"

if [[ ! -x "$bin_dir/coredns" ]]; then
	go_build_env

	# As CoreDNS's Makefile: strip, record the version where `coredns
	# -version` shows the git commit, and build with grpcnotrace (drops
	# gRPC's x/net/trace, which CoreDNS does not use).
	ldflags="-s -w -X github.com/coredns/coredns/coremain.GitCommit=${COREDNS_VERSION}"

	tmp=$(mktemp -d "$bin_dir.tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	log "building coredns ${COREDNS_VERSION} into $bin_dir (go build -p ${KUBEFLAKE_BUILD_JOBS:-2}; a cold build takes a few minutes)"
	start=$SECONDS
	nice -n 10 "$go" build -p "${KUBEFLAKE_BUILD_JOBS:-2}" -trimpath -tags grpcnotrace \
		-ldflags "$ldflags" -o "$tmp/coredns" github.com/coredns/coredns
	mv -f "$tmp/coredns" "$bin_dir/coredns"
	log "built in $((SECONDS - start))s"
fi

echo "$bin_dir"
