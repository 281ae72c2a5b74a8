#!/usr/bin/env bash
# The alert table of docs/alerts.md, generated from the chart's rules
# (charts/kubeflake/files/alerts.yaml, rendered with the default values): one row per
# alert with its severity, its `for:` and its summary annotation. The rules file is the
# only list of alerts; the table is the section of docs/alerts.md between the two
# "alerts table" markers and is never edited by hand.
#
#   charts/kubeflake/tests/alerts-table.sh           print the table
#   charts/kubeflake/tests/alerts-table.sh --write   rewrite the section in docs/alerts.md
#   charts/kubeflake/tests/alerts-table.sh --check   fail (with a diff) when the section
#                                                    differs (a step of promtool.sh)
#
# Needs helm (KUBEFLAKE_BIN_DIR/helm, HELM, or on PATH).
set -euo pipefail

tests=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
chart=$(dirname "$tests")
repo=$(cd "$chart/../.." && pwd)
docs=$repo/docs/alerts.md
begin='<!-- BEGIN alerts table: generated from charts/kubeflake/files/alerts.yaml by charts/kubeflake/tests/alerts-table.sh --write; do not edit -->'
end='<!-- END alerts table -->'
log() { echo "alerts-table.sh: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

mode=${1:-print}
case $mode in print | --write | --check) ;; *) fail "usage: $0 [--write|--check]" ;; esac

helm=${HELM:-}
if [[ -z $helm && -n ${KUBEFLAKE_BIN_DIR:-} ]]; then helm=$KUBEFLAKE_BIN_DIR/helm; fi
if [[ -z $helm ]]; then helm=$(command -v helm || true); fi
[[ -n $helm && -x $helm ]] || fail "no helm: set KUBEFLAKE_BIN_DIR (e2e/controlplane/build.sh prints it) or HELM"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$helm" template kubeflake "$chart" --namespace kubeflake-system --kube-version 1.35.4 \
	--set metrics.prometheusRule.enabled=true \
	--show-only templates/prometheusrule.yaml >"$work/prometheusrule.yaml"

# One row per "- alert:"; for, severity and summary are single-line scalars in the rules
# file (a block scalar for summary fails here rather than making a wrong row).
{
	echo '| alert | severity | for | summary (default thresholds) |'
	echo '|---|---|---|---|'
	awk -v out="$work/rows" '
		function unquote(s) {
			if (s ~ /^".*"$/ || s ~ /^'"'"'.*'"'"'$/) s = substr(s, 2, length(s) - 2)
			return s
		}
		function flush() {
			if (name == "") return
			if (severity == "" || summary == "") { print "alert " name " has no severity or summary" > "/dev/stderr"; bad = 1 }
			gsub(/\|/, "\\|", summary)
			printf "| [%s](#%s) | %s | %s | %s |\n", name, tolower(name), severity, (dur == "" ? "-" : dur), summary
			name = ""
		}
		/^ *- alert: / { flush(); name = $3; dur = ""; severity = ""; summary = ""; next }
		name != "" && /^ *for: / { dur = $2; next }
		name != "" && /^ *severity: / { severity = unquote($2); next }
		name != "" && /^ *summary: / {
			s = $0; sub(/^ *summary: */, "", s)
			if (s ~ /^[>|]/ || s == "") { print "alert " name ": summary must be one line" > "/dev/stderr"; bad = 1 }
			summary = unquote(s); next
		}
		/^ *- record: / { flush(); next }
		END { flush(); exit bad }
	' "$work/prometheusrule.yaml"
} >"$work/table"
grep -q '^| \[' "$work/table" || fail "the rendered rules have no alert"

# The section as it is now: the lines strictly between the markers.
section() {
	awk -v b="$begin" -v e="$end" '$0 == e { inside = 0 } inside { print } $0 == b { inside = 1 }' "$docs"
}
[[ $mode == print ]] && { cat "$work/table"; exit 0; }
[[ $(grep -cxF "$begin" "$docs") -eq 1 && $(grep -cxF "$end" "$docs") -eq 1 ]] ||
	fail "docs/alerts.md needs exactly one line each: $begin / $end"

if [[ $mode == --check ]]; then
	if ! diff -u <(section) "$work/table" >"$work/diff"; then
		cat "$work/diff" >&2
		fail "docs/alerts.md's alert table differs from the rules (above: - docs, + rules); run charts/kubeflake/tests/alerts-table.sh --write"
	fi
	log "docs/alerts.md's alert table matches the rules ($(grep -c '^| \[' "$work/table") alerts)"
	exit 0
fi

awk -v b="$begin" -v e="$end" -v table="$work/table" '
	$0 == e { while ((getline line < table) > 0) print line; inside = 0 }
	!inside { print }
	$0 == b { inside = 1 }
' "$docs" >"$work/alerts.md"
cat "$work/alerts.md" >"$docs"
log "rewrote the alert table in docs/alerts.md"
