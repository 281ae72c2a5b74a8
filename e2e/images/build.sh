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
# where <hash> covers the binaries, the Dockerfile, pause.Containerfile, this script and
# scripts/lib/images.sh (what it shares with scripts/release.sh),
# so a warm run only checks that cargo has nothing to rebuild.
#
# An earlier release, for the upgrade tests (e2e/tests/upgrade.rs; releases.txt names them):
#
#   e2e/images/build.sh --ref <commit> --tag <version>
#
# builds operator, sidecar and example-app (not pause: the node's own) from that commit's
# tree (`git archive`, so the commit must be in this clone's history), with that tree's
# Dockerfile, tagged localhost/kubeflake/<name>:<version>. The last stdout line is the
# directory of their archives, <cache>/releases/<commit>/images/<version>; the tree itself
# (its chart, its CRDs) is <cache>/releases/<commit>/src. Both are kept: a release never
# changes, so a warm run builds nothing and runs no cargo at all.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
names=(operator sidecar example-app pause)

log() { echo "images/build.sh: $*" >&2; }
# The binaries, the source copy, the build context and the lock: shared with
# scripts/release.sh.
# shellcheck source=../../scripts/lib/images.sh
source "$repo/scripts/lib/images.sh"
images_init

ref="" tag=dev
while (($#)); do
	case $1 in
	--ref) ref=${2:?--ref needs a commit}; shift 2 ;;
	--tag) tag=${2:?--tag needs a version}; shift 2 ;;
	*)
		log "unknown argument $1 (usage: build.sh [--ref COMMIT --tag VERSION])"
		exit 2
		;;
	esac
done

for tool in buildah gcc cargo; do
	command -v "$tool" >/dev/null || {
		log "needs $tool (scripts/install-deps.sh installs it)"
		exit 1
	}
done

images_lock

# make_context: the Dockerfile's prebuilt context ($ctx/runtime) and the pause binary
# ($ctx/pause) from the binaries just built.
ctx=""
tmp=""
trap 'rm -rf "$ctx" "$tmp"' EXIT
make_context() {
	ctx=$(mktemp -d "$cache_root/images/context.XXXXXX")
	images_make_context "$ctx"
	mkdir "$ctx/pause"
	gcc -static -Os -s -o "$ctx/pause/pause" "$here/pause.c"
}

build() { # name, then buildah bud arguments; the archive goes to $tmp/<name>.tar
	local name=$1 image="localhost/kubeflake/$1:$tag"
	shift
	log "building $image"
	buildah "${storage[@]}" bud --quiet --isolation chroot --layers=false \
		--tag "$image" "$@" >&2
	buildah "${storage[@]}" push --quiet "$image" "docker-archive:$tmp/$name.tar:$image" >&2
	buildah "${storage[@]}" rmi "$image" >/dev/null 2>&1 || true
}

# complete DIR NAME...: every <name>.tar is in DIR.
complete() {
	local dir=$1 name
	shift
	for name in "$@"; do [[ -f $dir/$name.tar ]] || return 1; done
}

if [[ -n $ref ]]; then
	commit=$(git -C "$repo" rev-parse --verify --quiet "$ref^{commit}") || {
		log "no commit $ref in this clone's history (releases.txt names each release's commit)"
		exit 1
	}
	release_dir="$cache_root/releases/$commit"
	out="$release_dir/images/$tag"
	release_names=(operator sidecar example-app)
	if complete "$out" "${release_names[@]}"; then
		echo "$out"
		exit 0
	fi
	if [[ ! -f $release_dir/src/Cargo.toml ]]; then
		mkdir -p "$release_dir"
		rm -rf "$release_dir/src.tmp"
		mkdir "$release_dir/src.tmp"
		git -C "$repo" archive "$commit" | tar -x -C "$release_dir/src.tmp"
		mv "$release_dir/src.tmp" "$release_dir/src"
	fi
	images_build_binaries "$release_dir/src"
	make_context
	mkdir -p "$(dirname "$out")"
	tmp=$(mktemp -d "$out.tmp.XXXXXX")
	for target in "${release_names[@]}"; do
		build "$target" --file "$release_dir/src/Dockerfile" --build-arg BINARIES=prebuilt \
			--target "$target" "$ctx/runtime"
	done
	rm -rf "$out"
	mv "$tmp" "$out"
	echo "$out"
	exit 0
fi

src="$cache_root/image-src"
images_sync_src "$repo" "$src"
images_build_binaries "$src"
make_context
hash=$({
	(cd "$ctx" && sha256sum runtime/* pause/pause)
	cat "$repo/Dockerfile" "$here/pause.Containerfile" "$0" "$repo/scripts/lib/images.sh"
	echo "$tag"
} | sha256sum | cut -c1-16)
out="$cache_root/images/$hash"
if complete "$out" "${names[@]}"; then
	echo "$out"
	exit 0
fi

tmp=$(mktemp -d "$out.tmp.XXXXXX")
for target in operator sidecar example-app; do
	build "$target" --file "$repo/Dockerfile" --build-arg BINARIES=prebuilt --target "$target" "$ctx/runtime"
done
build pause --file "$here/pause.Containerfile" "$ctx/pause"
rm -rf "$out"
mv "$tmp" "$out"
# Older image sets are of no further use.
find "$cache_root/images" -mindepth 1 -maxdepth 1 -type d ! -name "$hash" ! -name 'context.*' -exec rm -rf {} + 2>/dev/null || true
echo "$out"
