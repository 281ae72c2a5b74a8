#!/usr/bin/env bash
# Every client library's own tests, then the shared conformance suite
# (clients/conformance/cases.json) for each, against real standalone sidecars built from
# this tree. Exits non-zero if anything failed; the last line says what passed.
#
#   clients/test.sh [SIDECAR_BINARY]    default: $KUBEFLAKE_SIDECAR_BIN, else builds
#                                       ${CARGO_TARGET_DIR:-target}/debug/kubeflake-sidecar
#   KUBEFLAKE_CONFORMANCE=full          the conformance suite's full mode (1,000,000 IDs)
#
# scripts/test.sh calls it with the binary its build just made. Needs python3, go, java 17
# with mvn, and node 20+ (checked first); each client's test dependencies go into
# ~/.cache/kubeflake (Python's virtualenv, TypeScript) or Maven's ~/.m2, once.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in python3 go java mvn node; do
	command -v "$tool" >/dev/null || {
		echo "clients/test.sh: $tool is not installed; the client libraries' tests need it" >&2
		exit 2
	}
done
say() { echo "clients/test.sh: [${SECONDS}s] $*" >&2; }

sidecar=${1:-${KUBEFLAKE_SIDECAR_BIN:-}}
if [[ -z $sidecar ]]; then
	say "building the sidecar (cargo build -p kubeflake-sidecar)"
	cargo build --locked --quiet -p kubeflake-sidecar
	sidecar="${CARGO_TARGET_DIR:-target}/debug/kubeflake-sidecar"
fi
[[ -x $sidecar ]] || {
	echo "clients/test.sh: $sidecar is not an executable kubeflake-sidecar" >&2
	exit 2
}
sidecar=$(realpath "$sidecar")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
run() {
	local name=$1
	shift
	say "$name: $*"
	"$@" || failed+=("$name")
}

run "python tests" clients/python/test.sh "$sidecar"
python="${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/clients-py/venv/bin/python"

run "go tests" env KUBEFLAKE_SIDECAR_BIN="$sidecar" bash -c 'cd clients/go && go vet ./... && go test -race -count=1 ./...'
# The Prometheus collector is a module of its own (client_golang from the Go module proxy, once).
run "go prometheus collector tests" env KUBEFLAKE_SIDECAR_BIN="$sidecar" bash -c 'cd clients/go/prometheus && go vet ./... && go test -race -count=1 ./...'
# The benchmarks' module (sonyflake from the Go module proxy, once): vet, and the paced
# row's own tests (its histogram and schedule); no benchmark runs here.
run "go bench harness tests" env KUBEFLAKE_SIDECAR_BIN="$sidecar" bash -c 'cd clients/go/bench && go vet ./... && go test -race -count=1 ./...'
say "go: building the conformance driver"
(cd clients/go && go build -o "$work/go-driver" ./cmd/conformance-driver) || failed+=("go driver build")

conformance() { run "conformance $1" python3 clients/conformance/run.py --sidecar "$sidecar" --client "$1" -- "${@:2}"; }
conformance python "$python" clients/python/conformance_driver.py
conformance python-asyncio "$python" clients/python/conformance_driver.py --async
[[ -x $work/go-driver ]] && conformance go "$work/go-driver"
run "java tests" clients/java/test.sh "$sidecar"
java_driver=clients/java/kubeflake-client/target
[[ -d $java_driver/test-classes ]] && conformance java java -cp "$java_driver/classes:$java_driver/test-classes" io.kubeflake.client.ConformanceDriver
# Node 20+: tsc (pinned, from npm into ~/.cache/kubeflake once) checks the declarations; no runtime dependencies.
run "node tests" clients/node/test.sh "$sidecar"
conformance node node clients/node/conformance-driver.js

if ((${#failed[@]})); then
	say "FAILED: ${failed[*]}"
	exit 1
fi
say "every client passed its tests and the conformance suite"
