#!/usr/bin/env bash
# Checks what the chart ships for Prometheus and Grafana, exactly as it renders:
#   1. renders the PrometheusRule (release "kubeflake" in "kubeflake-system", default
#      values) and extracts its spec, the rule groups, to alerts.rules.yaml;
#   2. `promtool check rules` on it (PromQL parses, templates expand, no duplicates);
#   3. `promtool test rules` on tests/alerts_test.yaml (input series per alert);
#   4. every alert has a test where it fires and one where it stays quiet, and a runbook
#      section "## <alert>" in docs/alerts.md; the alert table in docs/alerts.md is the one
#      tests/alerts-table.sh generates from the rules (`alerts-table.sh --write` rewrites it);
#   5. the dashboard (dashboards/kubeflake.json) is JSON, and every panel query parses:
#      each one, with Grafana's variables replaced, becomes a recording rule that
#      `promtool check rules` must accept.
# Exits non-zero on the first failure. Needs helm (KUBEFLAKE_BIN_DIR/helm, HELM, or on
# PATH), promtool (Debian package prometheus) and jq.
#
#   charts/kubeflake/tests/promtool.sh
set -euo pipefail

tests=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
chart=$(dirname "$tests")
repo=$(cd "$chart/../.." && pwd)
log() { echo "promtool.sh: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

helm=${HELM:-}
if [[ -z $helm && -n ${KUBEFLAKE_BIN_DIR:-} ]]; then helm=$KUBEFLAKE_BIN_DIR/helm; fi
if [[ -z $helm ]]; then helm=$(command -v helm || true); fi
[[ -n $helm && -x $helm ]] || fail "no helm: set KUBEFLAKE_BIN_DIR (e2e/controlplane/build.sh prints it) or HELM"
command -v promtool >/dev/null || fail "no promtool: install the Debian package prometheus (scripts/install-deps.sh)"
command -v jq >/dev/null || fail "no jq: install the Debian package jq (scripts/install-deps.sh)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The rules as the chart renders them: the lines under "spec:", one indent less.
"$helm" template kubeflake "$chart" --namespace kubeflake-system --kube-version 1.35.4 \
	--set metrics.prometheusRule.enabled=true \
	--show-only templates/prometheusrule.yaml >"$work/prometheusrule.yaml"
awk 'found { sub(/^  /, ""); print } /^spec:$/ { found = 1 }' \
	"$work/prometheusrule.yaml" >"$work/alerts.rules.yaml"
grep -q '^groups:' "$work/alerts.rules.yaml" || fail "no rule groups under spec: in the rendered PrometheusRule"

# 2 and 3. promtool resolves rule_files relative to the test file: both in one directory.
log "promtool check rules (the rendered PrometheusRule)"
promtool check rules "$work/alerts.rules.yaml"
cp "$tests/alerts_test.yaml" "$work/alerts_test.yaml"
log "promtool test rules (tests/alerts_test.yaml)"
promtool test rules "$work/alerts_test.yaml"

# 4. Coverage: "alertname: X" followed by "exp_alerts: []" is a quiet case, followed by
# "exp_alerts:" and a list a firing one.
alerts=$(sed -n 's/^ *- alert: *//p' "$work/alerts.rules.yaml" | sort -u)
[[ -n $alerts ]] || fail "the rendered rules have no alert"
awk '
	/^ *alertname:/ { name = $2; next }
	/^ *exp_alerts: *\[\] *$/ { if (name != "") print "quiet", name; name = ""; next }
	/^ *exp_alerts: *$/ { if (name != "") print "fires", name; name = ""; next }
' "$tests/alerts_test.yaml" | sort -u >"$work/cases"
missing=0
for alert in $alerts; do
	for kind in fires quiet; do
		if ! grep -qx "$kind $alert" "$work/cases"; then
			log "no test case where $alert $kind"
			missing=1
		fi
	done
	if ! grep -qx "## $alert" "$repo/docs/alerts.md"; then
		log "no runbook section '## $alert' in docs/alerts.md"
		missing=1
	fi
done
[[ $missing -eq 0 ]] || fail "alerts without tests or runbooks (above)"
log "$(wc -w <<<"$alerts") alerts, each tested firing and quiet, each with a runbook"
HELM=$helm "$tests/alerts-table.sh" --check || fail "docs/alerts.md's alert table is not the rules' (above)"

# 5. The dashboard: valid JSON, and every query parses. $__rate_interval and the
# dashboard's variables are what Grafana replaces before sending a query.
dashboard=$chart/dashboards/kubeflake.json
jq -e '.panels | length > 0' "$dashboard" >/dev/null || fail "$dashboard is not a dashboard with panels"
jq '{groups: [{name: "dashboard", rules: [
		[.. | objects | select(has("expr")) | .expr] | to_entries[]
		| {record: "dashboard_query_\(.key)", expr: (.value
			| gsub("\\$__rate_interval"; "5m")
			| gsub("\\$namespace"; ".*"))}
	]}]}' "$dashboard" >"$work/dashboard.rules.yaml"
queries=$(jq '.groups[0].rules | length' "$work/dashboard.rules.yaml")
[[ $queries -gt 0 ]] || fail "the dashboard has no query"
if grep -q '\$' "$work/dashboard.rules.yaml"; then
	fail "a dashboard query uses a variable this script does not replace: $(grep -o '\$[A-Za-z_]*' "$work/dashboard.rules.yaml" | sort -u | tr '\n' ' ')"
fi
log "promtool check rules ($queries dashboard queries)"
promtool check rules "$work/dashboard.rules.yaml"
log "ok"
