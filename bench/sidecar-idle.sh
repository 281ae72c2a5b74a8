#!/usr/bin/env bash
# What a cluster-mode sidecar that serves nothing costs: its CPU per second once ready
# (utime + stime from /proc, 10 ms resolution), its slot Lease already written. Against the
# local test control plane, no node, no operator, as bench/sidecar-start.sh. Give two
# binaries to compare them side by side: rounds alternate between them. Measured, never
# asserted.
#
#   eval "$(e2e/cluster up)"; bench/sidecar-idle.sh [SECONDS] [ROUNDS] [BINARY...]; e2e/cluster down
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
rounds=${2:-3}
shift $(($# < 2 ? $# : 2))
source bench/sidecar-lease.sh
if (($# == 0)); then
	cargo build --release -q -p kubeflake-sidecar
	set -- target/release/kubeflake-sidecar
fi
sidecar_lease_setup sidecar-idle
source bench/proc-cpu.sh
n=0
for round in $(seq 1 "$rounds"); do
	for bin in "$@"; do
		n=$((n + 1))
		uid="uid-$n-$$"
		sidecar_lease_write "$n" "$uid" 15
		sidecar_start_ready "$bin" "$n" "$uid"
		before=$(stat_ms "$pid")
		sleep "$secs"
		after=$(stat_ms "$pid")
		sidecar_stop
		awk -v b="$bin" -v r="$round" -v ms=$((after - before)) -v s="$secs" \
			'BEGIN { printf "round %d  %-40s idle %d s: %d ms CPU, %.2f ms per second\n", r, b, s, ms, ms / s }'
	done
done
