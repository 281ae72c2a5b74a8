#!/usr/bin/env bash
# RUSTC_WRAPPER for scripts/fuzz.sh: adds libFuzzer's coverage instrumentation (stable
# codegen flags, no -Z) to kubeflake's own crates only, the code under test. Dependencies
# (kube, serde, ...) compile as usual: quicker to build, and their coverage would only
# distract the fuzzer from the parsers.
#   rustc-wrapper.sh RUSTC ARGS...
set -euo pipefail
rustc=$1
shift
name=""
prev=""
for arg in "$@"; do
	[[ $prev == --crate-name ]] && name=$arg
	prev=$arg
done
case $name in
kubeflake_crds | kubeflake_fuzz | wire | leases)
	exec "$rustc" "$@" \
		-Cpasses=sancov-module \
		-Cllvm-args=-sanitizer-coverage-level=4 \
		-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
		-Cllvm-args=-sanitizer-coverage-pc-table \
		-Cllvm-args=-sanitizer-coverage-trace-compares \
		-Cdebug-assertions -Coverflow-checks
	;;
*) exec "$rustc" "$@" ;;
esac
