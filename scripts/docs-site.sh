#!/usr/bin/env bash
# Builds the documentation site with mdBook and checks every link in it:
#   1. scripts/docs_site.py stages the repository's files (README, docs/, CHANGELOG, the
#      READMEs beside the code) and writes the navigation, so links written for the
#      repository work unchanged in the site;
#   2. mdBook builds it (navigation, search);
#   3. scripts/docs_site.py checks that every link of every page leads to a page or file of
#      the site, and to a heading that exists when it names one. Links to other sites are not
#      fetched (CI has no network).
# mdBook is built from crates.io, pinned, into ~/.cache/kubeflake/mdbook-<version> (once; a
# few minutes on two cores).
#
#   scripts/docs-site.sh [OUT]     OUT: where the site goes (default: a temporary directory,
#                                  removed afterwards); open OUT/index.html in a browser
#   scripts/docs-site.sh --build-only   only build mdBook (scripts/test.sh, ahead of time)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "docs-site: $*" >&2; }

version=0.4.52
root="${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/mdbook-$version"
mdbook=$root/bin/mdbook
if [[ ! -x $mdbook ]]; then
	mkdir -p "$(dirname "$root")"
	exec 8>"$root.lock"
	flock 8 # another run building it: wait, then find it built
	if [[ ! -x $mdbook ]]; then
		log "building mdBook $version into $root (once)"
		nice -n 10 cargo install --locked --quiet mdbook --version "$version" \
			--no-default-features --features search --root "$root"
	fi
	exec 8>&-
fi
[[ ${1:-} == --build-only ]] && exit 0

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out="${1:-$work/site}"
python3 scripts/docs_site.py stage "$work/src"
"$mdbook" build "$work/src" --dest-dir "$(realpath -m "$out")" 2>"$work/mdbook.log" || {
	cat "$work/mdbook.log" >&2
	log "FAIL: mdBook could not build the site (its errors above)"
	exit 1
}
# mdBook warns (but builds) when a page cannot be read or a link preprocessor fails.
if grep -E '\b(WARN|ERROR)\b' "$work/mdbook.log" >&2; then
	log "FAIL: mdBook warned (above)"
	exit 1
fi
python3 scripts/docs_site.py check "$out" || {
	log "FAIL: broken links (above): fix the link in the page named, or the heading it points at"
	exit 1
}
log "ok: $out"
