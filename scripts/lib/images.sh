# What e2e/images/build.sh (the test node's images) and scripts/release.sh (the release's
# images) share: the static binaries, built once into one cache, and the Dockerfile's
# `BINARIES=prebuilt` build context made from them. Sourced, not run.
#
#   images_init               sets cache_root, target_dir, triple, bin (the binaries'
#                             directory) and storage (buildah's --storage-driver, --root
#                             and --runroot under the cache)
#   images_lock               holds <cache>/images.lock (fd 9) until the script ends: the
#                             source copy, the target dir and buildah's storage are shared
#   images_sync_src REPO SRC  copies REPO's files (git's tracked and untracked, not ignored)
#                             to SRC, touching only those whose content differs, and
#                             removes from SRC the files REPO no longer has
#   images_build_binaries SRC builds the static release binaries of the tree at SRC
#   images_make_context DIR   DIR/runtime: the Dockerfile's prebuilt context (the three
#                             binaries, debug info stripped, and the CA roots)
#
# Callers define `log` (a function writing to stderr) first. Needs cargo, gcc, strip.

images_init() {
	cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
	target_dir="$cache_root/image-target"
	triple=x86_64-unknown-linux-gnu
	bin="$target_dir/$triple/release"
	storage=(--storage-driver vfs --root "$cache_root/buildah/root" --runroot "$cache_root/buildah/run")
}

images_lock() {
	mkdir -p "$cache_root/images"
	exec 9>"$cache_root/images.lock"
	flock 9
}

# The sources are built from a copy at a fixed path, synced by content: a fresh clone
# (CI's) has another path and new mtimes, either of which makes cargo rebuild every
# workspace crate; the copy keeps both for files whose content did not change.
images_sync_src() {
	local repo=$1 src=$2 file
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
}

images_build_binaries() {
	log "building static release binaries of $1 (cargo, target dir $target_dir)"
	# --target: RUSTFLAGS then applies to the binaries only, not to build scripts and proc
	# macros, which must stay dynamic to be loaded by the compiler. A clean environment:
	# called from a test, cargo's own variables (CARGO_PKG_*, LD_LIBRARY_PATH, ...) would
	# otherwise change build-script fingerprints and rebuild everything. One target dir for
	# every tree: the dependencies they share are compiled once (a workspace crate's
	# artifacts are told apart by its path, so trees do not overwrite each other's).
	env -i PATH="$PATH" HOME="$HOME" ${RUSTUP_HOME:+RUSTUP_HOME="$RUSTUP_HOME"} \
		${CARGO_HOME:+CARGO_HOME="$CARGO_HOME"} ${RUSTUP_TOOLCHAIN:+RUSTUP_TOOLCHAIN="$RUSTUP_TOOLCHAIN"} \
		RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$target_dir" \
		nice -n 5 cargo build --release --locked --quiet --target "$triple" \
		--manifest-path "$1/Cargo.toml" \
		-p kubeflake-operator -p kubeflake-sidecar -p kubeflake-example-app >&2
}

images_make_context() {
	local binary
	mkdir -p "$1/runtime"
	# Debug line tables stay in the cache's binaries; the images get them without (a tenth
	# of the size), symbols kept for readable backtraces.
	for binary in kubeflake-operator kubeflake-sidecar kubeflake-example-app; do
		strip --strip-debug -o "$1/runtime/$binary" "$bin/$binary"
	done
	cp /etc/ssl/certs/ca-certificates.crt "$1/runtime/"
}
