#!/usr/bin/env bash
# How long a cluster-mode sidecar takes from its process start to ready (its /readyz 200,
# as the injected postStart hook sees it) when its slot Lease is already written, as it
# usually is when a pod starts (docs/benchmarks.md, "Pod start-up"). Against the local
# test control plane, no node, no operator: the Lease is written here as the operator
# would write it. Measured, never asserted.
#
#   eval "$(e2e/cluster up)"; bench/sidecar-start.sh [RUNS]; e2e/cluster down
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-8}
[[ -n ${KUBECONFIG:-} ]] || { echo "sidecar-start.sh: run eval \"\$(e2e/cluster up)\" first" >&2; exit 2; }
cargo build --release -q -p kubeflake-sidecar
bin=target/release/kubeflake-sidecar
ns=sidecar-start-$$
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
times=()
for i in $(seq 1 "$runs"); do
	uid="uid-$i-$$"
	kubectl apply -n "$ns" -f - >/dev/null <<YAML
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: orders-slot-$i
  labels: {kubeflake.io/sequence: orders, kubeflake.io/slot: "$i", kubeflake.io/holder: "$uid"}
  annotations: {kubeflake.io/fence: "0"}
spec: {holderIdentity: "$uid", leaseTransitions: 1, leaseDurationSeconds: 120}
YAML
	start=$(date +%s%N)
	POD_NAME="p$i" POD_NAMESPACE="$ns" POD_UID="$uid" KUBEFLAKE_SEQUENCE=orders \
		"$bin" cluster --listen 127.0.0.1:17070 --probe-listen 127.0.0.1:17071 \
		--state-dir "$work/$i" >"$work/$i.log" 2>&1 &
	pid=$!
	"$bin" wait-ready http://127.0.0.1:17071/readyz --timeout-secs 30 2>/dev/null
	end=$(date +%s%N)
	times+=($(((end - start) / 1000000)))
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "sidecar process start -> ready, $runs runs: min $(head -1 <<<"$sorted") ms, median $(sed -n "$(((runs + 1) / 2))p" <<<"$sorted") ms, max $(tail -1 <<<"$sorted") ms"
