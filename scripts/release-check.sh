#!/usr/bin/env bash
# Checks that a release is reproducible: runs scripts/release.sh twice, into two fresh
# directories, and fails unless both give the same image digests and the same SHA256SUMS
# (every artifact byte for byte: image archives, manifests, SBOMs, chart, notes). The
# release itself checks each SBOM against `cargo tree` (every crate of the binary's
# dependency tree is listed) and that the chart renders both images pinned by digest.
#
# With KUBEFLAKE_RELEASE_CHECK_SIGN=1 it also signs: a throw-away cosign key pair is made
# in a temp dir, the first release is signed with it, and every signature is verified
# with cosign verify-blob (cosign is built once from its Go module, ~10 minutes).
#
#   scripts/release-check.sh
#
# Runs with --allow-dirty (it tests the build, not the tree). Prints "release-check: ok"
# and exits 0, or names what differs and exits 1. The two releases' directories are
# removed at the end unless KUBEFLAKE_KEEP=1.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { echo "release-check: $*" >&2; }
fail() {
	log "FAIL: $*"
	exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kubeflake-release-check.XXXXXX")
if [[ ${KUBEFLAKE_KEEP:-} == 1 ]]; then
	trap 'log "kept $tmp"' EXIT
else
	trap 'rm -rf "$tmp"' EXIT
fi

sign_env=()
if [[ ${KUBEFLAKE_RELEASE_CHECK_SIGN:-} == 1 ]]; then
	# shellcheck source=lib/release-tools.sh
	source "$repo/scripts/lib/release-tools.sh"
	cosign=$(tool_cosign)
	cosign_offline
	log "making a throw-away cosign key pair"
	(cd "$tmp" && COSIGN_PASSWORD=throwaway "$cosign" generate-key-pair >/dev/null 2>&1) ||
		fail "cosign generate-key-pair failed"
	sign_env=(KUBEFLAKE_COSIGN_KEY="$tmp/cosign.key" COSIGN_PASSWORD=throwaway)
fi

for run in 1 2; do
	log "release, run $run of 2"
	start=$SECONDS
	if ((run == 1)); then
		env "${sign_env[@]}" "$repo/scripts/release.sh" --allow-dirty --out "$tmp/run$run" >"$tmp/run$run.stdout" ||
			fail "scripts/release.sh failed (run $run; its messages are above)"
	else
		"$repo/scripts/release.sh" --allow-dirty --out "$tmp/run$run" >"$tmp/run$run.stdout" ||
			fail "scripts/release.sh failed (run $run; its messages are above)"
	fi
	[[ $(tail -n 1 "$tmp/run$run.stdout") == "$tmp/run$run" ]] ||
		fail "scripts/release.sh's last stdout line is not its output directory (run $run)"
	log "  run $run took $((SECONDS - start)) s"
done

a="$tmp/run1" b="$tmp/run2"
version=$(cd "$a" && ls kubeflake-operator-*.oci.tar | sed -E 's/^kubeflake-operator-(.*)\.oci\.tar$/\1/')
for file in "kubeflake-operator-$version.oci.tar" "kubeflake-sidecar-$version.oci.tar" \
	"kubeflake-example-app-$version.oci.tar" "kubeflake-operator-$version.cdx.json" \
	"kubeflake-sidecar-$version.cdx.json" "kubeflake-$version.tgz" RELEASE-NOTES.md images.txt SHA256SUMS; do
	[[ -s $a/$file ]] || fail "the release has no $file"
done
diff -u "$a/images.txt" "$b/images.txt" >&2 || fail "two builds of the same tree gave different image digests (above)"
diff -u "$a/SHA256SUMS" "$b/SHA256SUMS" >&2 || fail "two builds of the same tree gave different artifacts (above)"
(cd "$a" && sha256sum --quiet -c SHA256SUMS) >&2 || fail "SHA256SUMS does not match the artifacts"

# Each archive's manifest is the one named by images.txt.
while read -r name digest; do
	archive="$a/kubeflake-$name-$version.oci.tar"
	got=$(tar -xOf "$archive" index.json | jq -r '.manifests[0].digest')
	[[ $got == "$digest" ]] || fail "$archive's index.json names $got, images.txt $digest"
	[[ sha256:$(sha256sum <"$a/kubeflake-$name-$version.manifest.json" | cut -d' ' -f1) == "$digest" ]] ||
		fail "kubeflake-$name-$version.manifest.json is not the manifest of digest $digest"
done <"$a/images.txt"

# The SBOM names the crates of Cargo.lock that the binary uses: a few by hand, beside the
# release's own complete check against `cargo tree`.
for crate in tokio kube-client serde_json hyper; do
	jq -e --arg c "$crate" '[.components[] | .. | objects | select(.name? == $c)] | length > 0' \
		"$a/kubeflake-operator-$version.cdx.json" >/dev/null ||
		fail "the operator's SBOM does not list $crate"
	grep -q "^name = \"$crate\"$" "$repo/Cargo.lock" || fail "$crate is not in Cargo.lock any more: update this check"
done

if ((${#sign_env[@]})); then
	for file in "$a"/*.manifest.json "$a"/*.cosign-payload.json "$a/SHA256SUMS"; do
		"$cosign" verify-blob --key "$a/cosign.pub" --insecure-ignore-tlog=true \
			--signature "$file.sig" "$file" >/dev/null 2>&1 || fail "cosign verify-blob of $file failed"
	done
	# A changed artifact must not verify.
	cp "$a/SHA256SUMS" "$tmp/tampered" && echo "x" >>"$tmp/tampered"
	if "$cosign" verify-blob --key "$a/cosign.pub" --insecure-ignore-tlog=true \
		--signature "$a/SHA256SUMS.sig" "$tmp/tampered" >/dev/null 2>&1; then
		fail "cosign verified a changed SHA256SUMS"
	fi
	# Each image's signature payload names its digest in images.txt.
	while read -r name digest; do
		got=$(jq -r '.critical.image["docker-manifest-digest"]' "$a/kubeflake-$name-$version.cosign-payload.json")
		[[ $got == "$digest" ]] || fail "kubeflake-$name-$version.cosign-payload.json signs $got, images.txt says $digest"
	done <"$a/images.txt"
	log "signatures verified with the throw-away key; a changed file is refused"
fi
log "ok: $(wc -l <"$a/images.txt") images with the same digests in two builds, identical SHA256SUMS"
