#!/usr/bin/env bash
# Static security checks with checkov of what kubeflake ships: the chart as it renders in
# every values variant below, and the Dockerfile.
#   1. renders the chart (Kubernetes 1.35.4, with its CRDs and the helm test pod) once per
#      variant, as release "kubeflake-<variant>" in namespace "kubeflake-<variant>";
#   2. runs checkov's kubernetes checks over every rendering and its dockerfile checks over
#      the Dockerfile, in one run (checkov links objects across files for its graph
#      checks, e.g. a pod to the NetworkPolicy that selects it: the distinct names and
#      namespaces keep each variant's objects to themselves);
#   3. fails on every failed check that tests/checkov-skips.yaml does not accept for that
#      resource and variant, and on files checkov cannot parse; each accepted finding is
#      printed with the reason the skip list gives; an entry that matches nothing is
#      reported (it can go);
#   4. checks every FROM of the Dockerfile names a tagged image, a stage or scratch (what
#      the skipped CKV_DOCKER_7 would check; checkov-skips.yaml says why).
# checkov comes from PyPI, pinned, into a virtualenv under ~/.cache/kubeflake/py (once);
# it runs offline (no policy download, no update check).
#
#   charts/kubeflake/tests/checkov.sh
# Needs helm: HELM, else KUBEFLAKE_BIN_DIR/helm, else the one e2e/controlplane/build.sh
# builds and caches (a no-op once built); and python3 with venv (scripts/install-deps.sh).
set -euo pipefail

tests=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
chart=$(dirname "$tests")
repo=$(cd "$chart/../.." && pwd)
skips=$tests/checkov-skips.yaml
log() { echo "checkov.sh: $*" >&2; }
fail() { log "FAIL: $*"; exit 1; }

# Values variants: "name|key=value ...", one --set per word ("json:key=<JSON>" for
# --set-json; no spaces in a word). Together they switch on every optional part of the
# chart and off every part that can be switched off. A name starting with "?" is rendered
# only once values.yaml has all its keys (for a part being added).
digest=$(printf 'sha256:%064x' 1)
variants=(
	"defaults|"
	"cert-manager|webhook.certManager.enabled=true"
	"monitoring|metrics.serviceMonitor.enabled=true metrics.podMonitor.enabled=true metrics.prometheusRule.enabled=true metrics.dashboard.enabled=true metrics.dashboard.namespace=monitoring"
	"no-webhook|webhook.enabled=false"
	"no-flow-control|flowControl.enabled=false"
	"no-lease-policy|leasePolicy.enabled=false leasePolicy.unsafeAssignWithoutPolicy=true"
	"one-replica|operator.replicas=1 operator.leaderElection.enabled=false operator.watchNamespace=apps operator.podDisruptionBudget.enabled=false metrics.service.enabled=false"
	"listed-namespaces|flowControl.namespaces={apps,shop} flowControl.operatorPriorityLevel= webhook.extraSANs={kubeflake.example.com} webhook.excludeNamespaces={monitoring} webhook.failurePolicy=Ignore"
	'?network-policy|networkPolicy.enabled=true json:networkPolicy.metricsFrom=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}] json:networkPolicy.egress=[{"to":[{"ipBlock":{"cidr":"10.0.0.1/32"}}],"ports":[{"port":6443,"protocol":"TCP"}]}]'
	"?image-digest|operator.image.digest=$digest sidecar.image.digest=$digest"
)

helm=${HELM:-}
if [[ -z $helm && -n ${KUBEFLAKE_BIN_DIR:-} ]]; then helm=$KUBEFLAKE_BIN_DIR/helm; fi
if [[ -z $helm ]]; then
	log "finding helm with e2e/controlplane/build.sh (builds it into ~/.cache/kubeflake the first time)"
	helm=$("$repo/e2e/controlplane/build.sh" | tail -n 1)/helm
fi
[[ -x $helm ]] || fail "no helm at '$helm': set KUBEFLAKE_BIN_DIR (e2e/controlplane/build.sh prints it) or HELM"
[[ -f $skips ]] || fail "no skip list $skips"

venv="${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/py/checkov-venv"
# Pinned so a new release (new checks) cannot change what CI checks overnight. Its own
# virtualenv: checkov pins many packages, which must not meet Schemathesis's.
requirements=("checkov==3.3.30")
stamp="$venv/.kubeflake-requirements"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "${requirements[*]}" ]]; then
	python3 -c 'import ensurepip, venv' 2>/dev/null ||
		fail "python3 cannot make a virtualenv: install the Debian package python3-venv (scripts/install-deps.sh)"
	log "installing ${requirements[*]} into $venv"
	rm -rf "$venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet "${requirements[@]}" || fail "pip install ${requirements[*]} failed"
	echo "${requirements[*]}" >"$stamp"
fi
python=$venv/bin/python

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/scan"

# 1. Render. Each variant into scan/<name>.yaml, so a finding names its variant.
for variant in "${variants[@]}"; do
	name=${variant%%|*}
	read -ra values <<<"${variant#*|}"
	if [[ $name == \?* ]]; then
		name=${name#\?}
		missing=$("$python" - "$chart/values.yaml" "${values[@]}" <<-'EOF'
			import sys, yaml
			values = yaml.safe_load(open(sys.argv[1]))
			for pair in sys.argv[2:]:
			    pair = pair.removeprefix("json:")
			    node = values
			    for key in pair.split("=", 1)[0].split("."):
			        if not isinstance(node, dict) or key not in node:
			            print(pair.split("=", 1)[0])
			            break
			        node = node[key]
		EOF
		)
		if [[ -n $missing ]]; then
			log "variant $name not rendered: values.yaml has no ${missing//$'\n'/, } yet"
			continue
		fi
	fi
	sets=()
	for value in "${values[@]}"; do
		if [[ $value == json:* ]]; then sets+=(--set-json "${value#json:}"); else sets+=(--set "$value"); fi
	done
	if ! "$helm" template "kubeflake-$name" "$chart" --namespace "kubeflake-$name" --kube-version 1.35.4 \
		--include-crds "${sets[@]}" >"$work/scan/$name.yaml" 2>"$work/helm.err"; then
		cat "$work/helm.err" >&2
		fail "helm template failed for variant $name (${values[*]:-default values})"
	fi
	echo "$name" >>"$work/variants"
done
cp "$repo/Dockerfile" "$work/scan/Dockerfile"

# 2. One checkov run over all of it. --soft-fail: the findings are judged below.
log "checkov ${requirements[0]#*==} over $(wc -l <"$work/variants") renderings of the chart and the Dockerfile"
(cd "$work/scan" && CKV_SKIP_PACKAGE_UPDATE_CHECK=true "$venv/bin/checkov" --directory . \
	--framework kubernetes dockerfile --skip-download --soft-fail --output json \
	>"$work/checkov.json" 2>"$work/checkov.err") || {
	cat "$work/checkov.err" >&2
	fail "checkov did not run"
}

# 3. Judge every failed check against the skip list.
"$python" - "$work/checkov.json" "$skips" "$work/variants" <<-'EOF' || fail "checkov findings or errors above (fix a finding, or skip it in $skips with the reason)"
	import fnmatch, json, os, sys, yaml
	report_path, skips_path, variants_path = sys.argv[1:]
	reports = json.load(open(report_path))
	if isinstance(reports, dict):
	    reports = [reports]
	variants = open(variants_path).read().split()
	entries = (yaml.safe_load(open(skips_path)) or {}).get("skips") or []
	ok = True
	def bad(message):
	    global ok
	    ok = False
	    print(f"checkov.sh: {message}", file=sys.stderr)
	for i, entry in enumerate(entries):
	    unknown = set(entry) - {"check", "resources", "variants", "except-variants", "reason"}
	    if unknown or not entry.get("check") or not str(entry.get("reason", "")).strip():
	        bad(f"skip entry {i + 1} ({entry.get('check')}): needs check and reason, may have resources, variants and except-variants; unknown keys {sorted(unknown)}")
	    entry["matched"] = 0
	def variant_of(path):
	    base = os.path.basename(path)
	    return base[:-5] if base.endswith(".yaml") else base
	def accepted(check):
	    for entry in entries:
	        if entry.get("check") != check["check_id"]:
	            continue
	        if "resources" in entry and not any(fnmatch.fnmatchcase(check["resource"], p) for p in entry["resources"]):
	            continue
	        if "variants" in entry and variant_of(check["file_path"]) not in entry["variants"]:
	            continue
	        if variant_of(check["file_path"]) in entry.get("except-variants", []):
	            continue
	        entry["matched"] += 1
	        return True
	    return False
	scanned, passed, failed, open_findings = set(), 0, 0, []
	for report in reports:
	    results = report.get("results", {})
	    for check in results.get("passed_checks", []):
	        scanned.add(variant_of(check["file_path"]))
	        passed += 1
	    for check in results.get("failed_checks", []):
	        scanned.add(variant_of(check["file_path"]))
	        failed += 1
	        if not accepted(check):
	            open_findings.append(check)
	    for error in results.get("parsing_errors") or []:
	        bad(f"checkov ({report.get('check_type')}) could not parse {error}")
	for name in variants + ["Dockerfile"]:
	    if name not in scanned:
	        bad(f"checkov checked nothing in {name} (not parsed?)")
	groups = {}
	for check in open_findings:
	    lines = "-".join(str(n) for n in check.get("file_line_range", []))
	    key = (check["check_id"], check["check_name"], check["resource"])
	    groups.setdefault(key, []).append(f"{variant_of(check['file_path'])}:{lines}")
	for (check_id, check_name, resource), where in groups.items():
	    bad(f"FAILED {check_id} {check_name}\n    {resource}\n    in {', '.join(sorted(where))}")
	for entry in entries:
	    if entry.get("matched"):
	        reason = " ".join(str(entry["reason"]).split())
	        print(f"checkov.sh: skipped {entry['check']} x{entry['matched']}: {reason[:150]}{'...' if len(reason) > 150 else ''}", file=sys.stderr)
	    else:
	        print(f"checkov.sh: note: skip entry {entry.get('check')} matched nothing in this run; remove it if that holds for every variant", file=sys.stderr)
	print(f"checkov.sh: {passed} passed, {failed} failed of which {failed - len(open_findings)} skipped, {len(open_findings)} open", file=sys.stderr)
	sys.exit(0 if ok else 1)
EOF

# 4. What CKV_DOCKER_7 cannot judge (FROM ${BINARIES}): every base is scratch, an earlier
# stage, a build argument whose default is an earlier stage, or an image with a tag other
# than latest (or a digest).
awk '
	toupper($1) == "ARG" { split($2, kv, "="); args[kv[1]] = kv[2] }
	toupper($1) == "FROM" {
		image = $2
		for (i = 2; i <= NF; i++) if ($i !~ /^--/) { image = $i; break }
		shown = image
		if (match(image, /^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$/)) {
			arg = image; gsub(/[${}]/, "", arg); image = args[arg]
		}
		ok = image == "scratch" || (image in stages) || image ~ /@sha256:/ ||
			(image ~ /:[^\/]+$/ && image !~ /:latest$/)
		if (!ok) { printf "checkov.sh: Dockerfile:%d: FROM %s is not a tagged image, a stage or scratch\n", NR, shown > "/dev/stderr"; bad = 1 }
		for (i = 1; i < NF; i++) if (toupper($i) == "AS") stages[$(i + 1)] = 1
	}
	END { exit bad }
' "$repo/Dockerfile" || fail "Dockerfile base images (above)"
log "ok"
