#!/usr/bin/env bash
# Cuts a release of kubeflake from this checkout: the version is Cargo.toml's
# [workspace.package] version (the chart's version and appVersion must agree).
#
#   scripts/release.sh [--out DIR] [--allow-dirty]
#
#   --out DIR       where the artifacts go (emptied first); default
#                   ${KUBEFLAKE_CACHE:-~/.cache/kubeflake}/releases-out/<version>
#   --allow-dirty   build even with uncommitted changes (for testing; the notes say so)
#
# Signing: with KUBEFLAKE_COSIGN_KEY=<cosign.key> (and COSIGN_PASSWORD, its password) the
# image manifests, the images and SHA256SUMS are signed with cosign (built once from its Go module,
# scripts/lib/release-tools.sh); without it nothing is signed. No key lives in the repo.
#
# Artifacts (docs/install.md, "Releases"), for <v> the version:
#   kubeflake-{operator,sidecar,example-app}-<v>.oci.tar   the images, OCI archives (one
#        image each, tagged <v>), built reproducibly: the same tree gives the same bytes
#   kubeflake-<name>-<v>.manifest.json   each image's manifest: its sha256 is the digest
#   kubeflake-<name>-<v>.cdx.json        each image's CycloneDX SBOM (cargo-cyclonedx):
#        every crate of its binary's dependency tree, checked against `cargo tree`
#   kubeflake-<v>.tgz     the Helm chart, operator and sidecar images pinned by digest
#   images.txt            <name> <digest>, one image a line
#   RELEASE-NOTES.md      the version's CHANGELOG.md section and the digests
#   SHA256SUMS            of all the above
#   cosign.pub, *.manifest.json.sig, SHA256SUMS.sig   only when signing, and per image
#   kubeflake-<name>-<v>.cosign-payload.json(.sig)   its cosign image signature, to attach
#        in a registry with `cosign attach signature` (docs/install.md, "Verifying a release")
#
# The binaries are e2e/images/build.sh's (scripts/lib/images.sh: the same cache, so
# after a test run nothing is compiled); the images come from the Dockerfile's
# BINARIES=prebuilt path. Progress goes to stderr; the LAST stdout line is the output
# directory.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "release.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}
# shellcheck source=lib/images.sh
source "$repo/scripts/lib/images.sh"
# shellcheck source=lib/release-tools.sh
source "$repo/scripts/lib/release-tools.sh"
# shellcheck source=lib/release-steps.sh
source "$repo/scripts/lib/release-steps.sh"
images_init

out="" allow_dirty=0
while (($#)); do
	case $1 in
	--out) out=${2:?--out needs a directory}; shift 2 ;;
	--allow-dirty) allow_dirty=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (usage: scripts/release.sh [--out DIR] [--allow-dirty])" ;;
	esac
done

for tool in buildah cargo gcc git jq strip sha256sum tar gzip; do
	command -v "$tool" >/dev/null || die "needs $tool (scripts/install-deps.sh installs buildah, jq, gcc)"
done

# The version, in the three places that name it.
version=$(awk '/^\[workspace\.package\]/ { in_ws = 1; next } /^\[/ { in_ws = 0 }
	in_ws && /^version *=/ { gsub(/^version *= *"|".*$/, ""); print; exit }' "$repo/Cargo.toml")
[[ -n $version ]] || die "no version in Cargo.toml's [workspace.package]"
chart_version=$(awk '/^version:/ { print $2; exit }' "$repo/charts/kubeflake/Chart.yaml")
app_version=$(awk '/^appVersion:/ { gsub(/"/, "", $2); print $2; exit }' "$repo/charts/kubeflake/Chart.yaml")
[[ $chart_version == "$version" && $app_version == "$version" ]] ||
	die "versions disagree: Cargo.toml $version, Chart.yaml version $chart_version appVersion $app_version (set all three)"

# A release is made of committed sources only.
commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null) || die "$repo is not a git checkout"
if [[ -n $(git -C "$repo" status --porcelain) ]]; then
	((allow_dirty)) || die "the tree has uncommitted changes (git status): commit or remove them, or pass --allow-dirty to test"
	log "WARNING: building with uncommitted changes (--allow-dirty): not a release to publish"
	dirty=" plus uncommitted changes"
else
	dirty=""
fi
# Every timestamp of the release is the commit's: reproducible, and still a real date.
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct HEAD)}

out=${out:-$cache_root/releases-out/$version}
mkdir -p "$out"
out="$(cd "$out" && pwd)"
find "$out" -mindepth 1 -delete
work=$(mktemp -d "${TMPDIR:-/tmp}/kubeflake-release.XXXXXX")
trap 'rm -rf "$work"' EXIT

helm=$(tool_helm)
cyclonedx=$(tool_cargo_cyclonedx)
cosign=""
if [[ -n ${KUBEFLAKE_COSIGN_KEY:-} ]]; then
	[[ -f $KUBEFLAKE_COSIGN_KEY ]] || die "KUBEFLAKE_COSIGN_KEY=$KUBEFLAKE_COSIGN_KEY is not a file (a cosign.key from cosign generate-key-pair)"
	cosign=$(tool_cosign)
fi

log "kubeflake $version at $commit$dirty, into $out"
images_lock
src="$cache_root/image-src"
images_sync_src "$repo" "$src"
images_build_binaries "$src"
images_make_context "$work/context"

names=(operator sidecar example-app)
declare -A digest
for name in "${names[@]}"; do
	release_image "$name"
	digest[$name]=$(jq -r '.manifests[0].digest' "$work/oci-$name/index.json")
	printf '%s %s\n' "$name" "${digest[$name]}" >>"$out/images.txt"
done
flock -u 9

for name in "${names[@]}"; do
	release_sbom "$name"
done
release_chart
release_notes
(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort |
	xargs sha256sum) >"$work/SHA256SUMS"
mv "$work/SHA256SUMS" "$out/SHA256SUMS"
if [[ -n $cosign ]]; then
	release_sign
fi
log "done: $(find "$out" -maxdepth 1 -type f | wc -l) files; images:"
sed 's/^/  /' "$out/images.txt" >&2
echo "$out"
