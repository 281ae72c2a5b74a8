#!/usr/bin/env bash
# Builds the test node's images from this repository, with buildah (no image registry is
# reachable here, and none is needed):
#
#   localhost/kubeflake/operator:dev      Dockerfile target operator     } BINARIES=prebuilt:
#   localhost/kubeflake/sidecar:dev       Dockerfile target sidecar      } the Dockerfile's own
#   localhost/kubeflake/example-app:dev   Dockerfile target example-app  } runtime stages
#   localhost/kubeflake/pause:dev         e2e/images/pause.Containerfile (the pod sandbox)
#
# The Rust binaries are built here, fully static (glibc, -C target-feature=+crt-static):
# the images hold nothing but the binary and the CA roots, as the Dockerfile's own musl
# build does. Each image is written as a docker-archive, ready for `ctr images import`.
#
# Output contract: the directory of <name>.tar archives is the LAST stdout line; progress
# goes to stderr. The archives are cached under
#   ${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/images/<hash>/
# where <hash> covers the binaries, the Dockerfile, pause.Containerfile and this script,
# so a warm run only checks that cargo has nothing to rebuild.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
target_dir="$cache_root/image-target"
triple=x86_64-unknown-linux-gnu
names=(operator sidecar example-app pause)

log() { echo "images/build.sh: $*" >&2; }

for tool in buildah gcc cargo; do
	command -v "$tool" >/dev/null || {
		log "needs $tool (scripts/install-deps.sh installs it)"
		exit 1
	}
done

mkdir -p "$cache_root/images"
exec 9>"$cache_root/images.lock"
flock 9

# The sources are built from a copy at a fixed path, synced by content: a fresh clone
# (CI's) has another path and new mtimes, either of which makes cargo rebuild every
# workspace crate; the copy keeps both for files whose content did not change.
src="$cache_root/image-src"
mkdir -p "$src"
if git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
	(cd "$repo" && git ls-files -z --cached --others --exclude-standard) >"$src.list"
else
	(cd "$repo" && find . -type f -not -path './target/*' -not -path './.git/*' -printf '%P\0') >"$src.list"
fi
while IFS= read -r -d '' file; do
	[[ -f "$repo/$file" ]] || continue
	if ! cmp -s "$repo/$file" "$src/$file"; then
		mkdir -p "$(dirname "$src/$file")"
		cp "$repo/$file" "$src/$file"
	fi
done <"$src.list"
# Files gone from the checkout go from the copy too (target/ is not in the copy).
(cd "$src" && find . -type f -printf '%P\0') | while IFS= read -r -d '' file; do
	grep -qzxF -- "$file" "$src.list" || rm -f "$src/$file"
done

log "building static release binaries (cargo, target dir $target_dir)"
# --target: RUSTFLAGS then applies to the binaries only, not to build scripts and proc
# macros, which must stay dynamic to be loaded by the compiler. A clean environment:
# called from a test, cargo's own variables (CARGO_PKG_*, LD_LIBRARY_PATH, ...) would
# otherwise change build-script fingerprints and rebuild everything.
env -i PATH="$PATH" HOME="$HOME" ${RUSTUP_HOME:+RUSTUP_HOME="$RUSTUP_HOME"} \
	${CARGO_HOME:+CARGO_HOME="$CARGO_HOME"} ${RUSTUP_TOOLCHAIN:+RUSTUP_TOOLCHAIN="$RUSTUP_TOOLCHAIN"} \
	RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$target_dir" \
	nice -n 5 cargo build --release --locked --quiet --target "$triple" \
	--manifest-path "$src/Cargo.toml" \
	-p kubeflake-operator -p kubeflake-sidecar -p kubeflake-example-app >&2
bin="$target_dir/$triple/release"

ctx=$(mktemp -d "$cache_root/images/context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
mkdir "$ctx/runtime" "$ctx/pause"
# Debug line tables stay in the cache's binaries; the images get them without (a tenth
# of the size), symbols kept for readable backtraces.
for binary in kubeflake-operator kubeflake-sidecar kubeflake-example-app; do
	strip --strip-debug -o "$ctx/runtime/$binary" "$bin/$binary"
done
cp /etc/ssl/certs/ca-certificates.crt "$ctx/runtime/"
gcc -static -Os -s -o "$ctx/pause/pause" "$here/pause.c"

hash=$({
	(cd "$ctx" && sha256sum runtime/* pause/pause)
	cat "$repo/Dockerfile" "$here/pause.Containerfile" "$0"
} | sha256sum | cut -c1-16)
out="$cache_root/images/$hash"
complete=1
for name in "${names[@]}"; do [[ -f $out/$name.tar ]] || complete=0; done
if ((complete)); then
	echo "$out"
	exit 0
fi

storage=(--storage-driver vfs --root "$cache_root/buildah/root" --runroot "$cache_root/buildah/run")
tmp=$(mktemp -d "$out.tmp.XXXXXX")
trap 'rm -rf "$ctx" "$tmp"' EXIT
build() { # name, then buildah bud arguments
	local name=$1 tag="localhost/kubeflake/$1:dev"
	shift
	log "building $tag"
	buildah "${storage[@]}" bud --quiet --isolation chroot --layers=false \
		--tag "$tag" "$@" >&2
	buildah "${storage[@]}" push --quiet "$tag" "docker-archive:$tmp/$name.tar:$tag" >&2
	buildah "${storage[@]}" rmi "$tag" >/dev/null 2>&1 || true
}
for target in operator sidecar example-app; do
	build "$target" --file "$repo/Dockerfile" --build-arg BINARIES=prebuilt --target "$target" "$ctx/runtime"
done
build pause --file "$here/pause.Containerfile" "$ctx/pause"
rm -rf "$out"
mv "$tmp" "$out"
# Older image sets are of no further use.
find "$cache_root/images" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" ! -name 'context.*' -exec rm -rf {} + 2>/dev/null || true
echo "$out"
