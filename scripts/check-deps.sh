#!/usr/bin/env bash
# Checks the workspace's dependency graph against deny.toml with cargo-deny:
#   licenses: every crate's license is on the (permissive) allow-list;
#   bans:     no wildcard version requirement ("*"); duplicate versions only warn;
#   sources:  crates come from the crates.io index only, none from git.
# Not the advisories check: it fetches the RustSec database from GitHub, which CI cannot
# reach (deny.toml says how to run it by hand).
# cargo-deny is built from crates.io, pinned, into ~/.cache/kubeflake/cargo-deny-<version>
# (once; a few minutes on two cores).
#
#   scripts/check-deps.sh
#   scripts/check-deps.sh --build-only   only build cargo-deny (scripts/test.sh, ahead of time)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "check-deps: $*" >&2; }

version=0.20.2
root="${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/cargo-deny-$version"
deny=$root/bin/cargo-deny
if [[ ! -x $deny ]]; then
	mkdir -p "$(dirname "$root")"
	exec 8>"$root.lock"
	flock 8 # another run building it: wait, then find it built
	if [[ ! -x $deny ]]; then
		log "building cargo-deny $version into $root (once)"
		nice -n 10 cargo install --locked --quiet cargo-deny --version "$version" --root "$root"
	fi
	exec 8>&-
fi
[[ ${1:-} == --build-only ]] && exit 0

if ! "$deny" --locked --color never check --hide-inclusion-graph --show-stats licenses bans sources; then
	log "FAIL: the dependency graph breaks deny.toml (errors above: change the dependency," \
		"or the policy in deny.toml with the reason)"
	exit 1
fi
log "ok"
