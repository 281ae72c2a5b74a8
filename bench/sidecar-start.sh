#!/usr/bin/env bash
# How long a cluster-mode sidecar takes from its process start to ready (its /readyz 200,
# as the injected postStart hook sees it), and the CPU it used until then (its threads'
# run time from /proc/<pid>/task/*/schedstat), when its slot Lease is already written, as it
# usually is when a pod starts (docs/benchmarks.md, "Pod start-up"). Against the local
# test control plane, no node, no operator: the Lease is written here as the operator
# would write it. Measured, never asserted.
#
#   eval "$(e2e/cluster up)"; bench/sidecar-start.sh [RUNS]; e2e/cluster down
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-8}
source bench/sidecar-lease.sh
cargo build --release -q -p kubeflake-sidecar
bin=target/release/kubeflake-sidecar
sidecar_lease_setup sidecar-start
times=()
cpus=()
source bench/proc-cpu.sh
# CPU time (ms, 0.1 ms resolution) of the process $pid so far, summed over its threads.
cpu_ms() { awk -v ns="$(schedstat_ns "$pid")" 'BEGIN {printf "%.1f", ns / 1e6}'; }
for i in $(seq 1 "$runs"); do
	uid="uid-$i-$$"
	sidecar_lease_write "$i" "$uid" 120
	start=$(date +%s%N)
	sidecar_start_ready "$bin" "$i" "$uid"
	end=$(date +%s%N)
	times+=($(((end - start) / 1000000)))
	cpus+=("$(cpu_ms)")
	sidecar_stop
done
# "min X ms, median Y ms, max Z ms" of the values given.
summary() {
	local sorted
	sorted=$(printf '%s\n' "$@" | sort -n)
	echo "min $(head -1 <<<"$sorted") ms, median $(sed -n "$((($# + 1) / 2))p" <<<"$sorted") ms, max $(tail -1 <<<"$sorted") ms"
}
echo "sidecar process start -> ready, $runs runs: $(summary "${times[@]}")"
echo "its CPU until ready: $(summary "${cpus[@]}")"
