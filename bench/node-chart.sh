# Sourced by the benchmarks that run on the test node (bench/pod-sidecar-cpu,
# bench/probe-period), from the repository's root:
#
#   node_with_chart         starts the node (`e2e/cluster up --node`) if it is not running,
#                           exports its KUBECONFIG and installs the chart (release kf) with
#                           the images built here; `e2e/cluster down` removes it all
#   node_sequence NS        namespace NS with an IdSequence `s` of default settings
#   schedstat_ns PID        the CPU time of process PID so far, ns, summed over its threads
#                           (user and kernel; 0 if it has gone)

node_with_chart() {
	eval "$(e2e/cluster up --node)"
	helm status kf -n kubeflake-system >/dev/null 2>&1 ||
		helm install kf charts/kubeflake -n kubeflake-system --create-namespace --wait --timeout 5m \
			--set operator.image.repository=localhost/kubeflake/operator --set operator.image.tag=dev \
			--set operator.image.pullPolicy=Never \
			--set sidecar.image.repository=localhost/kubeflake/sidecar --set sidecar.image.tag=dev \
			--set sidecar.image.pullPolicy=Never >/dev/null
}

node_sequence() {
	kubectl create namespace "$1" >/dev/null 2>&1 || true
	kubectl apply -f - >/dev/null <<YAML
apiVersion: kubeflake.io/v1alpha1
kind: IdSequence
metadata: {name: s, namespace: $1}
spec: {}
YAML
}

schedstat_ns() {
	{ cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ns += $1} END {printf "%.0f", ns}'
}
