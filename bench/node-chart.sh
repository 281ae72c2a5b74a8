# Sourced by the benchmarks that run on the test node (bench/pod-sidecar-cpu,
# bench/probe-period, bench/pod-cost), from the repository's root:
#
#   node_with_chart         starts the node (`e2e/cluster up --node`) if it is not running,
#                           exports its KUBECONFIG and installs the chart (release kf) with
#                           the images built here; `e2e/cluster down` removes it all
#   node_sequence NS        namespace NS with an IdSequence `s` of default settings
#   injected_pod NS FILE    writes to FILE the pod the webhook makes of a labelled pause pod
#                           in NS (a server-side dry run, nothing stored), less what the API
#                           server sets itself (the token volume, priority), so that copies
#                           of it can be created: the webhook finds its sidecar there and
#                           leaves them as they are
#   schedstat_ns, stat_ms   a process's CPU time (bench/proc-cpu.sh, sourced here)

source bench/proc-cpu.sh

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

injected_pod() {
	kubectl -n "$1" create --dry-run=server -o json -f - >"$2" <<YAML
apiVersion: v1
kind: Pod
metadata: {name: template, labels: {kubeflake.io/sequence: s}}
spec:
  containers: [{name: app, image: localhost/kubeflake/pause:dev, imagePullPolicy: Never}]
YAML
	python3 - "$2" <<'PY'
import json, sys
pod = json.load(open(sys.argv[1]))
spec = pod["spec"]
for server_set in ("priority", "preemptionPolicy"):
    spec.pop(server_set, None)
token = lambda name: name.startswith("kube-api-access-")  # the API server adds it again
spec["volumes"] = [v for v in spec.get("volumes", []) if not token(v["name"])]
for kind in ("initContainers", "containers"):
    for c in spec.get(kind, []):
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if not token(m["name"])]
meta = pod["metadata"]
pod["metadata"] = {"labels": meta.get("labels", {}), "annotations": meta.get("annotations", {})}
json.dump(pod, open(sys.argv[1], "w"))
PY
}
