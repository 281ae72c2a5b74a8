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
[[ -n ${KUBECONFIG:-} ]] || { echo "sidecar-idle.sh: run eval \"\$(e2e/cluster up)\" first" >&2; exit 2; }
if (($# == 0)); then
	cargo build --release -q -p kubeflake-sidecar
	set -- target/release/kubeflake-sidecar
fi
ns=sidecar-idle-$$
kubectl apply --server-side -f crds/idsequence.yaml >/dev/null
kubectl create namespace "$ns" >/dev/null
work=$(mktemp -d)
pid=""
cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
printf 'apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: orders}\nspec: {}\n' |
	kubectl apply -n "$ns" -f - >/dev/null
tick=$(getconf CLK_TCK)
cpu_ms() { awk -v tk="$tick" '{printf "%d", ($14 + $15) * 1000 / tk}' "/proc/$1/stat"; }
n=0
for round in $(seq 1 "$rounds"); do
	for bin in "$@"; do
		n=$((n + 1))
		uid="uid-$n-$$"
		kubectl apply -n "$ns" -f - >/dev/null <<YAML
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: orders-slot-$n
  labels: {kubeflake.io/sequence: orders, kubeflake.io/slot: "$n", kubeflake.io/holder: "$uid"}
  annotations: {kubeflake.io/fence: "0"}
spec: {holderIdentity: "$uid", leaseTransitions: 1, leaseDurationSeconds: 15}
YAML
		POD_NAME="p$n" POD_NAMESPACE="$ns" POD_UID="$uid" KUBEFLAKE_SEQUENCE=orders \
			"$bin" cluster --listen 127.0.0.1:17070 --probe-listen 127.0.0.1:17071 \
			--state-dir "$work/$n" >"$work/$n.log" 2>&1 &
		pid=$!
		"$bin" wait-ready http://127.0.0.1:17071/readyz --timeout-secs 30 2>/dev/null
		before=$(cpu_ms "$pid")
		sleep "$secs"
		after=$(cpu_ms "$pid")
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		pid=""
		awk -v b="$bin" -v r="$round" -v ms=$((after - before)) -v s="$secs" \
			'BEGIN { printf "round %d  %-40s idle %d s: %d ms CPU, %.2f ms per second\n", r, b, s, ms, ms / s }'
	done
done
