#!/usr/bin/env bash
# Runs every test: unit and integration tests of all crates, the e2e tests against a
# real kube-apiserver + etcd, and the real-node tests (kubelet, containerd, kube-proxy,
# CoreDNS; images built from the Dockerfile). Everything built from Go modules, the
# images and their static binaries are cached under ~/.cache/kubeflake, so only the
# first run on a machine builds them.
#
#   scripts/test.sh                  everything (what CI runs; the node needs root)
#   scripts/test.sh ARGS             the same, ARGS passed to every `cargo test` call
#   cargo test --workspace --exclude kubeflake-e2e    only the fast tests, no control plane
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."

step() { echo "test.sh: [$((SECONDS / 60))m$((SECONDS % 60))s] $*" >&2; }

# One test run at a time on a machine: the runs share the test node (fixed paths, a bridge,
# port 6443) and, below, one build directory. The lock is held by flock(1) itself (-o: no
# process this script starts inherits it, so a stray one cannot keep it).
cache_root=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
if [[ ${KUBEFLAKE_TEST_LOCK_HELD:-} != 1 ]]; then
	mkdir -p "$cache_root"
	lock="$cache_root/test.lock"
	busy=200
	KUBEFLAKE_TEST_LOCK_HELD=1 flock -o -n -E "$busy" "$lock" "$self" "$@" && exit 0 || status=$?
	((status == busy)) || exit "$status"
	step "another scripts/test.sh runs on this machine (it holds $lock); waiting for it, at most 2 h"
	KUBEFLAKE_TEST_LOCK_HELD=1 flock -o -w 7200 -E "$busy" "$lock" "$self" "$@" && exit 0 || status=$?
	((status != busy)) || echo "test.sh: $lock is still held after 2 h: stop the other run and try again" >&2
	exit "$status"
fi

step "installing missing Debian packages"
scripts/install-deps.sh

# The build directory: one per machine under the cache, not target/ of this checkout, so
# that a fresh clone (CI's) reuses the compiled dependencies and compiles only the
# workspace's own crates: 5 min instead of 15 on the project's 2-core machine (2026-11-28,
# `cargo test --workspace --no-run` in a second clone). The workspace's own artifacts are
# removed first (`cargo clean -p`, seconds): cargo keys them by the path inside the
# workspace, not by the checkout's, so another checkout's could otherwise pass for this
# one's (with that checkout's CARGO_MANIFEST_DIR compiled in); and the directory keeps one
# checkout's worth. Set CARGO_TARGET_DIR to build elsewhere (then nothing is removed).
if [[ -z ${CARGO_TARGET_DIR:-} ]]; then
	export CARGO_TARGET_DIR="$cache_root/cargo-target"
	# Dependencies of older Cargo.lock versions pile up; past 20 GiB start again.
	if [[ -d $CARGO_TARGET_DIR ]] && (($(du -s --block-size=1G "$CARGO_TARGET_DIR" | cut -f1) > 20)); then
		step "the build directory $CARGO_TARGET_DIR is over 20 GiB: removing it"
		rm -rf "$CARGO_TARGET_DIR"
	fi
	step "removing the workspace's own artifacts from the shared build directory $CARGO_TARGET_DIR"
	while read -r package; do
		cargo clean --locked --quiet -p "$package"
	done < <(cargo metadata --no-deps --format-version 1 --locked | jq -r '.packages[].name')
fi

step "building (or finding cached) control-plane and node binaries"
bin_dir=$(e2e/controlplane/build.sh | tail -n 1)
export KUBEFLAKE_BIN_DIR="$bin_dir"
step "building (or finding cached) CoreDNS"
e2e/dns/build.sh >/dev/null
step "building (or finding cached) the linearizability checker (porcupine)"
KUBEFLAKE_LINCHECK=$(e2e/linearizability/build.sh | tail -n 1)
export KUBEFLAKE_LINCHECK
step "building (or finding cached) the images"
e2e/images/build.sh >/dev/null
read -r previous_version previous_commit < <(grep -v '^#' releases.txt | awk 'NF >= 2' | tail -n 1)
# Not in the background (below): every node binary runs e2e/images/build.sh, which holds
# the images lock while it looks, so the [node] lane would wait for this build anyway.
step "building (or finding cached) the images of the previous release, $previous_version (e2e/tests/upgrade.rs)"
e2e/images/build.sh --ref "$previous_commit" --tag "$previous_version" >/dev/null

step "checking the chart's alerts and dashboard with promtool"
charts/kubeflake/tests/promtool.sh
step "checking the module graph (no cycles, no source file over 600 lines)"
scripts/check-modules.py
step "checking that every repository path the docs, manifests and module docs name exists"
scripts/check-paths.py
step "checking that docs/benchmarks.md is what bench/results/ makes and that bench/run lists every benchmark"
bench/report.py --check
step "checking the rendered chart (every values variant) and the Dockerfile with checkov"
charts/kubeflake/tests/checkov.sh

step "building the tests (cargo test --no-run)"
cargo test --workspace --locked --no-run "$@"

# The test binaries and the last checks run in three lanes, each lane one step after
# another, and the lanes one after another unless KUBEFLAKE_TEST_LANES=parallel (below);
# every line a lane prints starts with its name:
#   [node]    the e2e binaries that run the test node (Cluster::shared_with_node). There is
#             one node per machine (fixed paths, a bridge, port 6443): they take turns.
#   [other]   every other test binary (unit tests; e2e binaries whose control planes listen
#             on free loopback ports of their own) and the doc tests.
#   [checks]  Schemathesis and the client libraries (clients/test.sh) against the sidecar
#             just built, clippy, cargo deny, the release cut twice and signed
#             (scripts/release-check.sh), the docs site, the fuzzers.
# Why lanes at once can help: most of an e2e binary's time is waiting (Leases expiring, pods starting, processes
# stopping). Run one at a time they kept the 2 cores 7-55 % busy, most under 35 % (CPU
# sampled every 5 s, 2026-11-26): 25 min for the binaries. In lanes the same binaries took
# 15 min, [other] the longest (node 10-10.5 min, checks 1.7 min warm, 6 min with cargo-deny
# built), the cores 51 % busy. Tests never assert on wall-clock timings; their deadlines
# bound waits and are generous for a loaded machine. Every `cargo test` call names --workspace with target
# filters: the packages of the build above, so features unify the same way and nothing is
# rebuilt or relinked under a running test.
mapfile -t node_tests < <(grep -l 'shared_with_node' e2e/tests/*.rs | xargs -n1 basename | sed 's/\.rs$//' | sort)
mapfile -t all_tests < <(cargo metadata --no-deps --format-version 1 --locked |
	jq -r '.packages[].targets[] | select(.kind | index("test")) | .name' | sort -u)
mapfile -t other_tests < <(comm -23 <(printf '%s\n' "${all_tests[@]}") <(printf '%s\n' "${node_tests[@]}"))
((${#node_tests[@]} > 0 && ${#other_tests[@]} > 0)) || {
	echo "test.sh: found no test binaries (node: ${#node_tests[*]}, other: ${#other_tests[*]})" >&2
	exit 1
}
test_flags() { printf -- '--test=%s\n' "$@"; }
mapfile -t node_flags < <(test_flags "${node_tests[@]}")
mapfile -t other_flags < <(test_flags "${other_tests[@]}")

node_lane() {
	step "cargo test: ${node_tests[*]}"
	cargo test --workspace --locked --no-fail-fast "${node_flags[@]}" "$@"
}
# The suites that pin what the chart needs of the API server (CRD schemas and CEL rules, the
# Lease ValidatingAdmissionPolicy, RBAC, the webhook), run again on the oldest Kubernetes
# docs/install.md claims ("Supported Kubernetes versions"). The ID space's hub policy needs
# 1.33 (transformMapEntry): its three tests are left out there.
oldest_suites=(crd lease_policy lease_policy_guard id_space_objects rbac webhook lease_cas)
oldest_skip=(--skip the_hub_policy_lets_members --skip within_the_policys_budget
	--skip rule22_a_member_raises_the_segment_counter)
mapfile -t oldest_flags < <(test_flags "${oldest_suites[@]}")
other_lane() {
	local status=0
	step "cargo test: every lib and bin, ${other_tests[*]}"
	cargo test --workspace --locked --no-fail-fast --lib --bins "${other_flags[@]}" "$@" || status=$?
	step "cargo test: doc tests"
	cargo test --workspace --locked --no-fail-fast --doc "$@" || status=$?
	local oldest_bin_dir
	step "the control plane of the oldest Kubernetes the docs claim (e2e/controlplane/oldest; built in the background, waited for)"
	oldest_bin_dir=$(e2e/controlplane/build.sh oldest | tail -n 1) || return 1
	step "cargo test on $("$oldest_bin_dir/kube-apiserver" --version): ${oldest_suites[*]}"
	KUBEFLAKE_BIN_DIR=$oldest_bin_dir KUBEFLAKE_HELM=$bin_dir/helm cargo test --workspace --locked --no-fail-fast \
		"${oldest_flags[@]}" "$@" -- "${oldest_skip[@]}" || status=$?
	return "$status"
}
# check TITLE COMMAND...: one step of the [checks] lane. A failing step does not stop the
# lane; it is named on a line of its own, which the digest below finds (a CI log may keep
# only its tail, and the steps after a failing one print lines of their own).
check() {
	local title=$1
	shift
	step "$title"
	"$@" && return 0
	echo "test.sh: check failed: $title"
	return 1
}
checks_lane() {
	local status=0
	check "the sidecar's HTTP API against docs/openapi.yaml (Schemathesis)" \
		scripts/check-openapi.sh "${CARGO_TARGET_DIR:-target}/debug/kubeflake-sidecar" || status=1
	# The conformance suite's full mode: 1,000,000 IDs from 16 workers across a sidecar
	# restart, per client (issue 58's bar; seconds per client).
	check "the client libraries' tests and their conformance suite against the same sidecar (clients/test.sh)" \
		env KUBEFLAKE_CONFORMANCE="${KUBEFLAKE_CONFORMANCE:-full}" \
		clients/test.sh "${CARGO_TARGET_DIR:-target}/debug/kubeflake-sidecar" || status=1
	check "cargo clippy (warnings are errors)" \
		cargo clippy --workspace --all-targets --locked -- -D warnings || status=1
	check "the dependencies' licenses, versions and sources against deny.toml (cargo deny)" \
		scripts/check-deps.sh || status=1
	check "the release: cut twice, the same digests and SHA256SUMS, SBOMs against cargo tree, signed and verified (scripts/release-check.sh)" \
		env KUBEFLAKE_RELEASE_CHECK_SIGN=1 scripts/release-check.sh || status=1
	check "the documentation site: built with mdBook, every link checked (scripts/docs-site.sh)" \
		scripts/docs-site.sh || status=1
	check "the fuzzers: the forwarding wire format and the Lease parsers (scripts/fuzz.sh)" \
		scripts/fuzz.sh "${KUBEFLAKE_FUZZ_SECONDS:-20}" || status=1
	return "$status"
}
# How the lanes run: one after another (the default), or at once with
# KUBEFLAKE_TEST_LANES=parallel. At once is faster (on this project's 2-core machine, warm
# caches, 2026-11-30: 37 min against 53-58; with empty caches 82 min, where serial would
# take an estimated 100, past CI's limit of 90), but the load of one lane starves another's
# timing-sensitive tests: the fifty-pod start-up test (e2e startup: one app's first ID
# refused `fence_reached` while its sidecar's fence could not be raised in time) failed at
# once on 2026-11-27 and again on 2026-11-30 on an otherwise idle machine; the fault
# suite's "no refusal during an API server outage shorter than the lease" on 2026-11-27;
# id_space_clusters' blue/green client (503 twice) on 2026-11-30 with other work beside
# it. Those tests pin real promises under the load they are meant for, not under three
# lanes'. Lanes at once also found a real cross-lane bug (e2e node read a standalone
# operator's host routes as a pod's, fixed): a test that looks at this machine's processes
# must tell the node's pods from the other lanes' processes.
#
# Unless KUBEFLAKE_TEST_LANES says which, the builds' time decides: past 20 minutes before
# the lanes (a new machine: 49 min on 2026-11-30, against 8 with warm caches), lanes one
# after another would pass CI's 90 minutes for certain, so they run at once and the log
# says why; with warm caches they run one after another.
builds_minutes=$((SECONDS / 60))
if [[ -n ${KUBEFLAKE_TEST_LANES:-} ]]; then
	lanes_mode=$KUBEFLAKE_TEST_LANES
elif ((builds_minutes >= 20)); then
	lanes_mode=parallel
	step "the builds took ${builds_minutes} min (a machine with empty caches): the lanes run at once to stay within CI's 90 minutes (KUBEFLAKE_TEST_LANES=serial to run them one after another)"
else
	lanes_mode=serial
fi
case $lanes_mode in
serial | parallel) ;;
*)
	echo "test.sh: KUBEFLAKE_TEST_LANES must be serial or parallel, not '$lanes_mode'" >&2
	exit 2
	;;
esac
# in_lane NAME FUNCTION ARGS...: runs FUNCTION (in the background when the lanes run at
# once), its lines prefixed [NAME] and kept unprefixed in $lane_logs/NAME.log for the digest
# below.
lane_logs=$(mktemp -d)
trap 'rm -rf "$lane_logs"' EXIT
lane_pids=() lane_names=() failed=()
in_lane() {
	local name=$1
	shift
	if [[ $lanes_mode == serial ]]; then
		step "lane [$name]"
		("$@" 2>&1 | tee "$lane_logs/$name.log" | sed -u "s/^/[$name] /") || failed+=("$name")
		return 0
	fi
	("$@" 2>&1 | tee "$lane_logs/$name.log" | sed -u "s/^/[$name] /") &
	lane_pids+=($!) lane_names+=("$name")
}
# digest LOG: why a lane failed, in a few dozen lines, printed last because a CI log may be
# kept only by its tail: the targets that failed, from each test binary's `failures:` block
# every failing test's name and the lines around its panic or returned error, and each
# failed step of the [checks] lane with the lines it printed last (the lane's last lines
# if there is neither).
digest() {
	local blocks checks
	blocks=$(awk '/^failures:$/ { inside = 1 } inside { print } /^test result: FAILED/ { inside = 0 }' "$1")
	checks=$(grep -E -B 20 '^test.sh: check failed: ' "$1" | cut -c1-240 || true)
	grep -E -A 3 '^error: [0-9]+ targets? failed' "$1" || true
	if [[ -z $blocks && -z $checks ]]; then
		tail -n 30 "$1"
		return
	fi
	if [[ -n $checks ]]; then
		# The failures the client libraries' runners and the conformance suite name (JUnit,
		# Go, node:test, pytest, run.py), wherever they are in the lane's log.
		grep -E '<<< FAILURE|AssertionFailedError|^\[ERROR\]   [A-Za-z]|^not ok|^--- FAIL|^FAIL |^FAILED |^E   ' "$1" | cut -c1-240 | head -n 20 || true
		echo "$checks"
	fi
	[[ -z $blocks ]] && return
	grep -E '^---- .* ----$' <<<"$blocks" || true
	grep -E -B 12 -A 6 'panicked at|^Error: ' <<<"$blocks" | cut -c1-240 || true
}
# The builds only later steps need, each cached after its first run, start here in the
# background at the lowest CPU priority, one after another in the order they are needed:
# on a new machine (about 25 minutes of CPU in all) they use the cores the test lanes leave
# idle while they wait on pods and Leases, instead of lengthening the steps above. cosign
# (registry_install, mid-[node] lane, and the [checks] lane's release-check sign with it),
# the oldest control plane (the end of the [other] lane), then the [checks] lane's tools:
# cargo-deny, mdBook and the fuzz targets. Each script holds a lock while it builds, and the
# step that needs it runs the same script, which waits on that lock or finds the cache; a
# failure here shows again there.
background_log="$cache_root/background-builds.log"
(
	set +e # one build failing does not stop the others
	renice -n 19 -p "$BASHPID" >/dev/null
	e2e/registry/cosign.sh >/dev/null
	e2e/controlplane/build.sh oldest >/dev/null
	scripts/check-deps.sh --build-only
	scripts/docs-site.sh --build-only
	scripts/fuzz.sh --build-only
) >"$background_log" 2>&1 &
background_pid=$!
# Under `set -e` a failing command in an EXIT trap becomes the script's exit status: the
# background builds have usually ended by now, so `kill` finds nothing and must not turn a
# green run red (CI stop 67 exited 1 after printing "done" for that reason alone).
stop_background() {
	pkill -P "$background_pid" 2>/dev/null || true
	kill "$background_pid" 2>/dev/null || true
	rm -rf "$lane_logs"
}
trap stop_background EXIT
step "building in the background, at the lowest priority: cosign, the oldest control plane, cargo-deny, mdBook, the fuzz targets (log: $background_log)"
step "running the lanes: [node], [other], [checks] ($lanes_mode)"
in_lane node node_lane "$@"
in_lane other other_lane "$@"
# With the lanes at once: Schemathesis comes first in its lane and runs no cargo, so clippy
# (which holds the build directory while it checks) starts after the test lanes' cargo
# calls are running.
in_lane checks checks_lane
for i in "${!lane_pids[@]}"; do
	wait "${lane_pids[$i]}" || failed+=("${lane_names[$i]}")
done
if ((${#failed[@]})); then
	for name in "${failed[@]}"; do
		echo "test.sh: why lane [$name] failed (its failing tests, the lines around each panic):" >&2
		digest "$lane_logs/$name.log" | head -n 60 | sed "s/^/[$name digest] /" >&2 || true
	done
	step "FAILED in lane ${failed[*]} (search the log for 'test result: FAILED', 'error:' and 'FAIL')"
	exit 1
fi
step "done"
