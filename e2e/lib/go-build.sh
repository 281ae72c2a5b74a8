# What the e2e scripts that build Go binaries into the cache share (sourced, not run):
# e2e/controlplane/build.sh, e2e/dns/build.sh and e2e/linearizability/build.sh.
#
#   go_find                   sets $go: $GO, else `go` on PATH, else /usr/local/go/bin/go
#   go_cache_key FILE...      16 hex digits over the files, this helper, the Go version and
#                             platform: the name of a cache directory
#   go_lock DIR               holds DIR.lock (fd 9) until the script ends: several test
#                             binaries may ask at once; one builds, the others then find
#                             the binaries present
#   go_build_env              Go's own caches under the same root (CI caches one
#                             directory), read-only modules, the local toolchain, static
#                             binaries
#
# Callers set `log` (a function writing to stderr) and `cache_root` first.

go_find() {
	go=${GO:-go}
	if ! command -v "$go" >/dev/null 2>&1; then go=/usr/local/go/bin/go; fi
	if ! command -v "$go" >/dev/null 2>&1; then
		log "no Go toolchain found (set GO=/path/to/go)"
		exit 1
	fi
}

go_cache_key() {
	{
		cat "$@" "${BASH_SOURCE[0]}"
		echo "$("$go" env GOVERSION) $("$go" env GOOS GOARCH)"
	} | sha256sum | cut -c1-16
}

go_lock() {
	mkdir -p "$1"
	exec 9>"$1.lock"
	flock 9
}

go_build_env() {
	export GOCACHE="$cache_root/go/build"
	export GOMODCACHE="$cache_root/go/mod"
	export GOFLAGS=-mod=readonly
	export GOTOOLCHAIN=local
	export CGO_ENABLED=0
}
