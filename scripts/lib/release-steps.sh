# The steps of scripts/release.sh, one function each. Sourced, not run; they read the
# release's variables (repo, src, work, out, version, commit, dirty, epoch, triple,
# storage, helm, cyclonedx, cosign, digest) and write into $out.
#
#   release_image NAME   the Dockerfile's target NAME as an OCI archive, reproducibly
#   release_sbom NAME    the image's CycloneDX SBOM, checked against `cargo tree`
#   release_chart        the chart, images pinned by digest, packaged reproducibly
#   release_notes        RELEASE-NOTES.md: the version's CHANGELOG.md section, the digests
#   release_sign         cosign signatures of the manifests, the images (payloads to attach
#                        in a registry) and SHA256SUMS, then verified

# reproducible_tar DIR FILE...: a tar of FILE... (relative to DIR) on stdout whose bytes
# depend only on their contents: sorted, the release's mtime, no owner names.
reproducible_tar() {
	local dir=$1
	shift
	tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner \
		--mode='u=rwX,go=rX' --format=gnu -C "$dir" -cf - "$@"
}

release_image() {
	local name=$1 ref="localhost/kubeflake/$1:$version-release" layout="$work/oci-$1" manifest
	log "building image $name (buildah, --timestamp $epoch)"
	# --timestamp: the image's created time, its history's and every file's in the layers
	# are the commit's, so the same binaries give the same digest.
	buildah "${storage[@]}" bud --quiet --isolation chroot --layers=false --timestamp "$epoch" \
		--file "$src/Dockerfile" --build-arg BINARIES=prebuilt --target "$name" \
		--tag "$ref" "$work/context/runtime" >&2
	buildah "${storage[@]}" push --quiet "$ref" "oci:$layout:$version" >&2
	buildah "${storage[@]}" rmi "$ref" >/dev/null 2>&1 || true
	[[ $(jq '.manifests | length' "$layout/index.json") == 1 ]] ||
		die "the OCI layout of $name holds other than one image ($layout/index.json)"
	reproducible_tar "$layout" oci-layout index.json blobs >"$out/kubeflake-$name-$version.oci.tar"
	manifest=$(jq -r '.manifests[0].digest' "$layout/index.json")
	cp "$layout/blobs/sha256/${manifest#sha256:}" "$out/kubeflake-$name-$version.manifest.json"
}

# The crates of a package's binary: "name version" lines from `cargo tree` (normal
# dependencies, for the images' target), the package itself included.
crates_of() {
	cargo tree --manifest-path "$src/Cargo.toml" --locked --quiet -e normal --target "$triple" \
		-p "$1" --prefix none --format '{p}' |
		awk '{ sub(/^v/, "", $2); print $1, $2 }' | LC_ALL=C sort -u
}

release_sbom() {
	local name=$1 package="kubeflake-$1" sbom="$out/kubeflake-$1-$version.cdx.json" dir missing
	log "SBOM of $name (cargo-cyclonedx)"
	# cargo-cyclonedx writes <package>.cdx.json beside each Cargo.toml of the workspace:
	# it runs in a throw-away copy of the sources, never in the checkout.
	dir="$work/sbom-src"
	if [[ ! -d $dir ]]; then
		mkdir -p "$dir"
		(cd "$src" && tar -cf - --exclude=./target .) | tar -xf - -C "$dir"
		(cd "$dir" && env SOURCE_DATE_EPOCH="$epoch" "$cyclonedx" cyclonedx --format json \
			--spec-version 1.5 --target "$triple" --describe binaries --no-build-deps -q >&2) ||
			die "cargo-cyclonedx failed (above)"
	fi
	local found
	found=$(find "$dir" -name "${package}_bin.cdx.json" -print -quit)
	[[ -n $found ]] || die "cargo-cyclonedx wrote no SBOM for the binary $package (in $dir)"
	# Reproducible: the time is the commit's, the serial number a UUID made from the
	# contents (RFC 4122 layout) instead of a random one, and the workspace's crates are
	# referred to under /kubeflake instead of the throw-away copy's path.
	local body uuid
	body=$(sed "s|file://$dir|file:///kubeflake|g" "$found" |
		jq --sort-keys --arg t "$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" \
			'del(.serialNumber) | .metadata.timestamp = $t')
	uuid=$(printf '%s' "$body" | sha256sum | cut -c1-32 |
		sed -E 's/^(.{8})(.{4}).(.{3}).(.{3})(.{12})$/\1-\2-5\3-8\4-\5/')
	jq --sort-keys --arg s "urn:uuid:$uuid" '.serialNumber = $s' <<<"$body" >"$sbom"
	# The check: every crate of the binary's dependency tree is in its SBOM.
	missing=$(comm -23 <(crates_of "$package") \
		<(jq -r '[.metadata.component, (.components // [])[]] | .. | objects
			| select(has("name") and has("version")) | "\(.name) \(.version)"' "$sbom" | LC_ALL=C sort -u))
	[[ -z $missing ]] || die "the SBOM of $name lacks crates of cargo tree -p $package: $(echo "$missing" | tr '\n' ' ')"
	log "  $(crates_of "$package" | wc -l) crates of cargo tree -p $package, all in the SBOM"
}

release_chart() {
	local chart="$work/chart/kubeflake" pinned unpacked="$work/chart-unpacked" rendered
	log "chart kubeflake-$version.tgz, images pinned by digest"
	mkdir -p "$work/chart" "$work/chart-pkg" "$unpacked"
	cp -r "$src/charts/kubeflake" "$chart"
	# The `digest: ""` of operator.image and of sidecar.image (top-level keys), nothing else.
	awk -v op="${digest[operator]}" -v sc="${digest[sidecar]}" '
		/^[A-Za-z]/ { top = $1 }
		top == "operator:" && /^    digest: ""$/ { sub(/""/, "\"" op "\""); n++ }
		top == "sidecar:" && /^    digest: ""$/ { sub(/""/, "\"" sc "\""); n++ }
		{ print }
		END { if (n != 2) exit 1 }' "$src/charts/kubeflake/values.yaml" >"$chart/values.yaml" ||
		die "charts/kubeflake/values.yaml: expected operator.image.digest and sidecar.image.digest as 'digest: \"\"'"
	"$helm" package "$chart" --destination "$work/chart-pkg" >/dev/null
	# Repacked so that the bytes do not depend on the time (helm stamps the entries and the
	# gzip header with the packaging time).
	tar -xzmf "$work/chart-pkg/kubeflake-$version.tgz" -C "$unpacked"
	reproducible_tar "$unpacked" kubeflake | gzip -n -9 >"$out/kubeflake-$version.tgz"
	rendered=$("$helm" template kubeflake "$out/kubeflake-$version.tgz" --namespace kubeflake-system \
		--kube-version 1.35.4)
	pinned=0
	grep -qF "kubeflake/operator@${digest[operator]}" <<<"$rendered" && pinned=$((pinned + 1))
	grep -qF "kubeflake/sidecar@${digest[sidecar]}" <<<"$rendered" && pinned=$((pinned + 1))
	((pinned == 2)) || die "the packaged chart does not render both images pinned by digest"
}

release_notes() {
	local section name
	section=$(awk -v v="$version" '
		BEGIN { esc = v; gsub(/\./, "\\.", esc) }
		/^## / {
			if (p) exit
			if ($0 ~ ("^## \\[?" esc "\\]?( |$)") || $0 ~ ("^## Unreleased \\(" esc "[,)]")) p = 1
		}
		p' "$repo/CHANGELOG.md")
	[[ -n $section ]] || die "CHANGELOG.md has no section for $version ('## $version - <date>')"
	if [[ $(head -n 1 <<<"$section") == "## Unreleased"* ]]; then
		log "WARNING: CHANGELOG.md's section for $version is still 'Unreleased': rename it to '## $version - <date>' when cutting the release"
	fi
	{
		echo "# kubeflake $version"
		echo
		echo "Cut from commit $commit$dirty. Images, as OCI archives (docs/install.md, \"Releases\"):"
		echo
		for name in operator sidecar example-app; do
			echo "- \`kubeflake-$name-$version.oci.tar\`: \`${digest[$name]}\`"
		done
		echo
		echo "The chart \`kubeflake-$version.tgz\` pins the operator and sidecar images by these digests."
		echo
		printf '%s\n' "$section"
	} >"$out/RELEASE-NOTES.md"
}

release_sign() {
	local file name
	log "signing the image manifests, the images and SHA256SUMS (cosign, key $KUBEFLAKE_COSIGN_KEY)"
	cosign_offline
	"$cosign" public-key --key "$KUBEFLAKE_COSIGN_KEY" --outfile "$out/cosign.pub" >&2
	# Each image's cosign signature payload (`cosign generate`: the image digest; its
	# docker-reference, localhost/kubeflake/<name>, is not checked by `cosign verify`): a
	# user attaches it with its signature to the image in their registry (`cosign attach
	# signature`), where `cosign verify` and admission controllers find it.
	for name in "${names[@]}"; do
		"$cosign" generate "localhost/kubeflake/$name@${digest[$name]}" \
			>"$out/kubeflake-$name-$version.cosign-payload.json" 2>"$work/cosign.log" ||
			die "cosign generate of $name failed: $(cat "$work/cosign.log")"
	done
	for file in "$out"/*.manifest.json "$out"/*.cosign-payload.json "$out/SHA256SUMS"; do
		"$cosign" sign-blob --yes --key "$KUBEFLAKE_COSIGN_KEY" --tlog-upload=false \
			--output-signature "$file.sig" "$file" >/dev/null 2>"$work/cosign.log" ||
			die "cosign sign-blob $file failed: $(cat "$work/cosign.log")"
		"$cosign" verify-blob --key "$out/cosign.pub" --insecure-ignore-tlog=true \
			--signature "$file.sig" "$file" >/dev/null 2>"$work/cosign.log" ||
			die "cosign verify-blob $file failed: $(cat "$work/cosign.log")"
	done
}
