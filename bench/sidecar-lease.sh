# shellcheck shell=bash
# Sourced by bench/sidecar-start.sh and bench/sidecar-idle.sh: a namespace with the
# IdSequence "orders" on the local test control plane, a slot Lease written as the operator
# would write it, and a cleanup that stops the sidecar in $pid and removes it all on exit.
#
#   sidecar_lease_setup NAME-PREFIX       sets $ns and $work, installs the cleanup
#   sidecar_lease_write SLOT UID SECONDS  writes orders-slot-SLOT held by UID
#   sidecar_start_ready BINARY SLOT UID   starts its sidecar, sets $pid, waits for ready
#   sidecar_stop                          stops it
[[ -n ${KUBECONFIG:-} ]] || { echo "${0##*/}: run eval \"\$(e2e/cluster up)\" first" >&2; exit 2; }

sidecar_lease_setup() {
	ns=$1-$$
	kubectl apply --server-side -f crds/idsequence.yaml >/dev/null
	kubectl create namespace "$ns" >/dev/null
	work=$(mktemp -d)
	pid=""
	trap sidecar_lease_cleanup EXIT
	printf 'apiVersion: kubeflake.io/v1alpha1\nkind: IdSequence\nmetadata: {name: orders}\nspec: {}\n' |
		kubectl apply -n "$ns" -f - >/dev/null
}

sidecar_lease_cleanup() {
	[[ -n $pid ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
	rm -rf "$work"
}

sidecar_lease_write() {
	kubectl apply -n "$ns" -f - >/dev/null <<YAML
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: orders-slot-$1
  labels: {kubeflake.io/sequence: orders, kubeflake.io/slot: "$1", kubeflake.io/holder: "$2"}
  annotations: {kubeflake.io/fence: "0"}
spec: {holderIdentity: "$2", leaseTransitions: 1, leaseDurationSeconds: $3}
YAML
}

# Starts BINARY in cluster mode as the holder of slot SLOT (UID), sets $pid, and returns
# once its /readyz answers 200 (as the injected postStart hook asks).
sidecar_start_ready() {
	POD_NAME="p$2" POD_NAMESPACE="$ns" POD_UID="$3" KUBEFLAKE_SEQUENCE=orders \
		"$1" cluster --listen 127.0.0.1:17070 --probe-listen 127.0.0.1:17071 \
		--state-dir "$work/$2" >"$work/$2.log" 2>&1 &
	pid=$!
	"$1" wait-ready http://127.0.0.1:17071/readyz --timeout-secs 30 2>/dev/null
}

# Stops the sidecar started by sidecar_start_ready.
sidecar_stop() {
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
}
