#!/usr/bin/env bash
# How long a cluster-mode sidecar takes from its process start to ready (its /readyz 200,
# as the injected startup probe sees it), and the CPU it used until then (its threads'
# run time from /proc/<pid>/task/*/schedstat), when its slot Lease is already written, as it
# usually is when a pod starts (docs/benchmarks.md, "Pod start-up"). Against the local
# test control plane, no node, no operator: the Lease is written here as the operator
# would write it. Measured, never asserted.
#
#   eval "$(e2e/cluster up)"; bench/sidecar-start.sh [RUNS] [BINARY...]; e2e/cluster down
#
# Give several binaries to compare them side by side: runs alternate between them.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-8}
shift $(($# < 1 ? $# : 1))
source bench/sidecar-lease.sh
if (($# == 0)); then
	cargo build --release -q -p kubeflake-sidecar
	set -- target/release/kubeflake-sidecar
fi
sidecar_lease_setup sidecar-start
declare -A times cpus
# CPU time (ms, 0.1 ms resolution) of the process $pid so far, summed over its threads.
cpu_ms() {
	cat /proc/"$pid"/task/*/schedstat | awk '{ns += $1} END {printf "%.1f", ns / 1e6}'
}
n=0
for i in $(seq 1 "$runs"); do
	for bin in "$@"; do
		n=$((n + 1))
		uid="uid-$n-$$"
		sidecar_lease_write "$n" "$uid" 120
		start=$(date +%s%N)
		sidecar_start_ready "$bin" "$n" "$uid"
		end=$(date +%s%N)
		times[$bin]+="$(((end - start) / 1000000)) "
		cpus[$bin]+="$(cpu_ms) "
		sidecar_stop
	done
done
# "min X ms, median Y ms, max Z ms" of the values given.
summary() {
	local sorted
	sorted=$(printf '%s\n' "$@" | sort -n)
	echo "min $(head -1 <<<"$sorted") ms, median $(sed -n "$((($# + 1) / 2))p" <<<"$sorted") ms, max $(tail -1 <<<"$sorted") ms"
}
for bin in "$@"; do
	# shellcheck disable=SC2086 # the lists are space-separated numbers
	echo "$bin: sidecar process start -> ready, $runs runs: $(summary ${times[$bin]})"
	# shellcheck disable=SC2086
	echo "$bin: its CPU until ready: $(summary ${cpus[$bin]})"
done
