#!/usr/bin/env bash
# Builds the Kubernetes control plane used by the kubeflake e2e tests from Go
# modules, one pin set at a time (set.sh):
#
#   ./build.sh          the newest set: etcd, kube-apiserver, kube-controller-manager,
#                       kubectl and helm, and the node (kube-scheduler, kubelet,
#                       kube-proxy) for the real-node tests
#   ./build.sh oldest   the oldest Kubernetes the docs claim: etcd, kube-apiserver,
#                       kube-controller-manager and kubectl (a control plane, no node)
#
# The binaries are the set's COMMANDS (its versions.env). They go to a cache outside
# the repository:
#   ${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/bin/<hash>/
# where <hash> covers the set's versions.env, go.mod and go.sum, this script,
# set.sh, e2e/lib/go-build.sh and the Go version, so changing any pin builds into a
# fresh directory. Only binaries missing from that directory are built, so a warm
# run is a no-op that takes well under a second.
#
# Output contract: the bin directory is the LAST line on stdout; all progress
# goes to stderr. The Rust harness (e2e/src/bin_dir.rs) relies on this.
#
# Environment:
#   KUBEFLAKE_CACHE        cache root (default ~/.cache/kubeflake)
#   KUBEFLAKE_BUILD_JOBS   parallel package builds, go build -p (default 2)
#   GO                     go command (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { echo "build.sh: $*" >&2; }
# shellcheck source=set.sh
source "$here/set.sh"
pin_set "${1:-}"
# shellcheck source=../lib/go-build.sh
source "$here/../lib/go-build.sh"
go_find

# go.mod is generated from versions.env by update.sh; refuse to build a
# mixture of the two.
for pin in "k8s.io/kubernetes ${KUBERNETES_VERSION}" \
	"go.etcd.io/etcd/server/v3 ${ETCD_VERSION}" \
	${HELM_VERSION:+"helm.sh/helm/v3 ${HELM_VERSION}"} \
	"k8s.io/api => k8s.io/api ${KUBERNETES_STAGING_VERSION}"; do
	if ! grep -qF "	${pin}" go.mod; then
		log "$PWD/go.mod does not match versions.env (missing '${pin}'); run $here/update.sh ${1:-}"
		exit 1
	fi
done

cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
bin_dir="$cache_root/bin/$(go_cache_key versions.env go.mod go.sum "$here/build.sh" "$here/set.sh")"

# name:package, from versions.env.
binaries=("${COMMANDS[@]}")
# The file `go build -o DIR/` writes for a package: its last path element, or the one
# before a major-version suffix (go.etcd.io/etcd/server/v3 -> server).
go_output() {
	local pkg=$1 last=${1##*/}
	if [[ $last =~ ^v[0-9]+$ ]]; then
		pkg=${pkg%/*}
		last=${pkg##*/}
	fi
	echo "$last"
}

missing() {
	local entry
	for entry in "${binaries[@]}"; do
		[[ -x "$bin_dir/${entry%%:*}" ]] || echo "${entry#*:}"
	done
}

if [[ -z "$(missing)" ]]; then
	echo "$bin_dir"
	exit 0
fi

go_lock "$bin_dir"

mapfile -t packages < <(missing)
if ((${#packages[@]} > 0)); then
	go_build_env

	# Version strings, as the Kubernetes release scripts set them. The build
	# date is the release's commit time, so builds stay reproducible.
	k8s_time=$("$go" list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes)
	minor=${KUBERNETES_VERSION#v*.}
	minor=${minor%%.*}
	major=${KUBERNETES_VERSION#v}
	major=${major%%.*}
	ldflags="-s -w"
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=${KUBERNETES_VERSION}"
		ldflags+=" -X $pkg.gitMajor=${major} -X $pkg.gitMinor=${minor}"
		ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=${k8s_time:-1970-01-01T00:00:00Z}"
	done
	if [[ -n ${HELM_VERSION:-} ]]; then
		ldflags+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
		ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
	fi

	tmp=$(mktemp -d "$bin_dir.tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	log "building ${packages[*]} into $bin_dir (go build -p ${KUBEFLAKE_BUILD_JOBS:-2}; a cold build takes a while)"
	start=$SECONDS
	# One invocation for all missing commands: they share most packages.
	nice -n 10 "$go" build -p "${KUBEFLAKE_BUILD_JOBS:-2}" -trimpath -ldflags "$ldflags" -o "$tmp/" "${packages[@]}"
	for entry in "${binaries[@]}"; do
		name=${entry%%:*}
		out=$(go_output "${entry#*:}")
		if [[ -f "$tmp/$out" ]]; then mv -f "$tmp/$out" "$bin_dir/$name"; fi
	done
	log "built in $((SECONDS - start))s"
fi

echo "$bin_dir"
