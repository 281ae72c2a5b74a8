# The tools scripts/release.sh and scripts/release-check.sh use beyond the test node's,
# each built once from its package registry, pinned, into the cache (never the repo).
# Sourced, not run.
#
#   tool_cargo_cyclonedx   prints the path of cargo-cyclonedx (CycloneDX SBOMs of Rust
#                          crates, from the OWASP CycloneDX project), built with
#                          `cargo install --locked` into <cache>/tools/cargo-cyclonedx-<v>
#                          (once: about 3 minutes of CPU)
#   tool_cosign            prints the path of cosign (Sigstore's signing tool), built
#                          from its Go module into <cache>/tools/cosign-<v> (once: about
#                          10 minutes of CPU)
#   tool_crane             prints the path of crane (go-containerregistry's registry
#                          client, whose `crane registry serve` is also a small OCI
#                          registry), built from its Go module into
#                          <cache>/tools/crane-<v> (once: about 2 minutes of CPU); the
#                          node e2e pushes the release's archives with it
#   cosign_offline         exports the variables that keep cosign's verify commands
#                          from fetching Sigstore's trust root over the network
#   tool_helm              prints the path of helm: $KUBEFLAKE_HELM, else helm on PATH,
#                          else the one e2e/controlplane/build.sh builds for the tests
#
# Why cargo-cyclonedx and not syft: an SBOM tool that reads the image finds no crates in
# a static Rust binary (no package database, no cargo-auditable section), while
# cargo-cyclonedx reads the resolved graph of Cargo.lock for exactly the binary's package
# and target; it is also a smaller build than syft's Go module.
#
# Callers define `log` (a function writing to stderr) and `repo` (the checkout) first.

cargo_cyclonedx_version=0.5.9
cosign_version=v2.6.5
crane_version=v0.22.1

tools_root() { echo "${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/tools"; }

tool_cargo_cyclonedx() {
	local root
	root="$(tools_root)/cargo-cyclonedx-$cargo_cyclonedx_version"
	if [[ ! -x $root/bin/cargo-cyclonedx ]]; then
		log "building cargo-cyclonedx $cargo_cyclonedx_version into $root (once, a few minutes)"
		mkdir -p "$(dirname "$root")"
		(
			exec 8>"$root.lock"
			flock 8
			[[ -x $root/bin/cargo-cyclonedx ]] ||
				nice -n 10 cargo install --locked --quiet cargo-cyclonedx \
					--version "$cargo_cyclonedx_version" --root "$root" >&2
		) || {
			log "could not build cargo-cyclonedx $cargo_cyclonedx_version (cargo install failed, above)"
			return 1
		}
	fi
	echo "$root/bin/cargo-cyclonedx"
}

tool_cosign() {
	local root cache_root
	cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
	root="$(tools_root)/cosign-$cosign_version"
	if [[ ! -x $root/bin/cosign ]]; then
		log "building cosign $cosign_version from its Go module into $root (once, about 10 minutes)"
		mkdir -p "$root"
		(
			exec 8>"$root.lock"
			flock 8
			[[ -x $root/bin/cosign ]] && exit 0
			export GOCACHE="$cache_root/go/build" GOMODCACHE="$cache_root/go/mod" \
				GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$root/bin" GOFLAGS=-buildvcs=false
			nice -n 10 go install -p 2 -trimpath \
				"github.com/sigstore/cosign/v2/cmd/cosign@$cosign_version" >&2
		) || {
			log "could not build cosign $cosign_version (go install failed, above)"
			return 1
		}
	fi
	echo "$root/bin/cosign"
}

# cosign_offline: cosign's verify commands fetch Sigstore's trust root (TUF) from the
# network even for a key-pair signature, which needs none; pointed at an empty cache and a
# mirror on loopback where nothing listens, they fail that fetch at once, locally, print a
# warning and verify with the key alone. The release is signed and checked offline.
cosign_offline() {
	TUF_ROOT="$(tools_root)/cosign-tuf-empty"
	TUF_MIRROR=http://127.0.0.1:9
	mkdir -p "$TUF_ROOT"
	export TUF_ROOT TUF_MIRROR
}

# go_tool NAME MODULE VERSION: NAME built from the Go package MODULE@VERSION into
# <cache>/tools/NAME-VERSION/bin (once, under a lock), its path printed.
go_tool() {
	local name=$1 module=$2 version=$3 root cache_root
	cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
	root="$(tools_root)/$name-$version"
	if [[ ! -x $root/bin/$name ]]; then
		log "building $name $version from its Go module into $root (once, a few minutes)"
		mkdir -p "$root"
		(
			exec 8>"$root.lock"
			flock 8
			[[ -x $root/bin/$name ]] && exit 0
			export GOCACHE="$cache_root/go/build" GOMODCACHE="$cache_root/go/mod" \
				GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$root/bin" GOFLAGS=-buildvcs=false
			nice -n 10 go install -p 2 -trimpath "$module@$version" >&2
		) || {
			log "could not build $name $version (go install $module@$version failed, above)"
			return 1
		}
	fi
	echo "$root/bin/$name"
}

tool_crane() {
	go_tool crane github.com/google/go-containerregistry/cmd/crane "$crane_version"
}

tool_helm() {
	if [[ -n ${KUBEFLAKE_HELM:-} ]]; then
		echo "$KUBEFLAKE_HELM"
	elif command -v helm >/dev/null 2>&1; then
		command -v helm
	else
		local dir
		dir=$("$repo/e2e/controlplane/build.sh" | tail -n 1) || {
			log "no helm: set KUBEFLAKE_HELM=/path/to/helm (e2e/controlplane/build.sh failed)"
			return 1
		}
		echo "$dir/helm"
	fi
}
