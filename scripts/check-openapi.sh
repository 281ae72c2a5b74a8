#!/usr/bin/env bash
# Checks the sidecar's HTTP API against its description, docs/openapi.yaml:
#   1. the document is valid OpenAPI (openapi-spec-validator);
#   2. Schemathesis, driven by the document, fuzzes a standalone sidecar in Snowflake
#      mode and in Segment mode with all its checks and no allowance (no undocumented status code,
#      no 5xx but the documented 503, bodies, headers and content types as documented,
#      405 for undeclared methods, valid input accepted, invalid input refused).
# Both tools come from PyPI into a virtualenv under ~/.cache/kubeflake/py (once).
#
#   scripts/check-openapi.sh [SIDECAR_BINARY]    default: builds target/debug/kubeflake-sidecar
#   KUBEFLAKE_FUZZ_SEED=N                        another seed (default: fixed, so CI is repeatable)
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/py"
venv="$cache/venv"
# Pinned so a new release cannot change what CI checks overnight.
requirements=("schemathesis==4.32.5" "openapi-spec-validator==0.9.0")
stamp="$venv/.kubeflake-requirements"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "${requirements[*]}" ]]; then
	echo "check-openapi: installing ${requirements[*]} into $venv" >&2
	rm -rf "$venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet "${requirements[@]}"
	echo "${requirements[*]}" >"$stamp"
fi

"$venv/bin/openapi-spec-validator" docs/openapi.yaml

sidecar="${1:-}"
if [[ -z "$sidecar" ]]; then
	cargo build --locked --quiet -p kubeflake-sidecar
	sidecar="${CARGO_TARGET_DIR:-target}/debug/kubeflake-sidecar"
fi

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# A free loopback port, chosen by the kernel.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Starts a standalone sidecar with the given extra flags; sets `url` to its base URL once
# it answers /readyz (at most 100 tries, 10 s). Not run in a $(...) subshell: its pid must
# reach `pids` in this shell, or cleanup would leave the sidecar running.
start() {
	local name=$1
	shift
	local port
	port=$(free_port)
	mkdir -p "$work/$name"
	"$sidecar" standalone --listen "127.0.0.1:$port" --state-dir "$work/$name" "$@" \
		>"$work/$name.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		if curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; then
			url="http://127.0.0.1:$port"
			return
		fi
		sleep 0.1
	done
	echo "check-openapi: the $name sidecar did not become ready; its log:" >&2
	cat "$work/$name.log" >&2
	exit 1
}

seed="${KUBEFLAKE_FUZZ_SEED:-20261123}"
fuzz() {
	local name=$1 url=$2
	echo "check-openapi: Schemathesis against the $name sidecar at $url (seed $seed)" >&2
	# Check the document the sidecar serves is this one, then fuzz from it.
	if ! curl -fsS "$url/openapi.yaml" | cmp -s - docs/openapi.yaml; then
		echo "check-openapi: $url/openapi.yaml differs from docs/openapi.yaml" >&2
		exit 1
	fi
	# Every check, no allowance: what the document allows, the sidecar accepts.
	(cd "$work" && "$venv/bin/schemathesis" run "$OLDPWD/docs/openapi.yaml" --checks all \
		--url "$url" --seed "$seed" --max-examples 100 --no-color)
}

start snowflake
snowflake=$url
fuzz Snowflake "$snowflake"
start segment --mode segment --block-size 100
segment=$url
fuzz Segment "$segment"
echo "check-openapi: OK" >&2
