#!/usr/bin/env bash
# Runs the coverage-guided fuzzers of fuzz/ (docs/checks.md, "Fuzzing"), each for a bounded
# time: `wire`, the strict oracle's forwarding wire format, and `leases`, the slot Lease,
# segment counter and oracle Lease parsers.
#
#   scripts/fuzz.sh [SECONDS]           # every target, SECONDS each (default 30)
#   scripts/fuzz.sh SECONDS TARGET...   # only these targets
#   scripts/fuzz.sh --build-only        # only build every target (scripts/test.sh, ahead of time)
#
# libFuzzer, built from the libfuzzer-sys crate with the stable toolchain: coverage comes
# from LLVM's sanitizer-coverage pass, asked for with plain -C codegen flags on kubeflake's
# own crates (fuzz/rustc-wrapper.sh), so no nightly and no sanitizer runtime is needed.
# The build is cached in $KUBEFLAKE_CACHE/fuzz-target (default ~/.cache/kubeflake): its
# dependencies compile once per machine. Each target starts from its committed seeds
# (fuzz/corpus/TARGET/) and the inputs earlier runs on this machine found interesting
# ($KUBEFLAKE_CACHE/fuzz-corpus/TARGET/, where new ones are added).
#
# A crash (a panic, an overflow, a failed assertion) stops its target: its input is saved
# in $KUBEFLAKE_CACHE/fuzz-crashes/TARGET/, the script prints the path, how to replay it,
# and exits 1 once every target ran.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

log() { echo "fuzz: $*" >&2; }

build_only=0
if [[ ${1:-} == --build-only ]]; then
	build_only=1
	shift
fi
seconds=${1:-30}
[[ $seconds =~ ^[1-9][0-9]*$ ]] || {
	log "SECONDS must be a whole number from 1 up, not '$seconds'"
	exit 2
}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(wire leases)

cache=${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}
export CARGO_TARGET_DIR=$cache/fuzz-target
log "building ${targets[*]} into $CARGO_TARGET_DIR"
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
started=$SECONDS
# fuzz/Cargo.lock pins what kubeflake-crds pulls in; when crds gains a dependency the lock
# is completed here (minimally, the pinned versions kept) rather than failing the run.
if ! (cd fuzz && cargo metadata --locked --format-version 1 >/dev/null 2>&1); then
	log "fuzz/Cargo.lock lacks what crds now needs: completing it (commit fuzz/Cargo.lock)"
	(cd fuzz && cargo metadata --format-version 1 >/dev/null)
fi
(cd fuzz && RUSTC_WRAPPER=$repo/fuzz/rustc-wrapper.sh nice -n 10 \
	cargo build --release --locked --quiet "${bins[@]}")
log "built in $((SECONDS - started)) s"
((build_only)) && exit 0

crashed=()
for t in "${targets[@]}"; do
	seeds=$repo/fuzz/corpus/$t
	corpus=$cache/fuzz-corpus/$t
	crashes=$cache/fuzz-crashes/$t
	mkdir -p "$corpus" "$crashes"
	flags=()
	[[ -f fuzz/$t.dict ]] && flags+=(-dict="$repo/fuzz/$t.dict")
	# The wire format is binary: comparisons of its integers guide the fuzzer to magic
	# values (found in about 20 s instead of minutes). On the Lease text it only crowds the
	# corpus with near-misses, so the leases target goes without.
	[[ $t == wire ]] && flags+=(-use_value_profile=1)
	log "running $t for $seconds s (seeds fuzz/corpus/$t, corpus $corpus)"
	out=$(mktemp)
	status=0
	# New inputs go to the first corpus folder, the cached one; the seeds are only read.
	# -rss_limit_mb: the Lease parsers allocate little; more is a bug.
	"$CARGO_TARGET_DIR/release/$t" "$corpus" "$seeds" "${flags[@]}" \
		-max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=1024 \
		-artifact_prefix="$crashes/" >"$out" 2>&1 || status=$?
	grep -E '^#[0-9]+.*(INITED|DONE)|^stat::(number_of_executed_units|new_units_added)' "$out" |
		sed "s/^/fuzz: [$t] /" >&2 || true
	if ((status != 0)); then
		tail -n 60 "$out" >&2
		input=$(grep -oE "Test unit written to [^ ]+" "$out" | tail -n 1 | cut -d' ' -f5 || true)
		log "FAIL: $t crashed (exit $status) on ${input:-an input not saved}"
		[[ -n $input ]] && log "replay it with: $CARGO_TARGET_DIR/release/$t $input"
		crashed+=("$t")
	fi
	rm -f "$out"
done
if ((${#crashed[@]})); then
	log "FAIL: ${crashed[*]} crashed (inputs above, in $cache/fuzz-crashes/)"
	exit 1
fi
log "ok: ${targets[*]}, $seconds s each, no crash"
