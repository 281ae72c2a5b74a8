#!/usr/bin/env bash
# The Node client's own checks: its declarations against test/types.ts (tsc --strict), then
# its tests (node --test) against real standalone sidecars.
#   clients/node/test.sh SIDECAR_BINARY
# The tests' one dev dependency, TypeScript's compiler (pinned in package.json), is installed by
# npm into ~/.cache/kubeflake/clients-node (KUBEFLAKE_CACHE moves it) once, and again only when
# the pin changes (the other, @sapphire/snowflake, is bench.js's alone). The client itself has
# no dependencies.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sidecar=${1:?usage: clients/node/test.sh SIDECAR_BINARY}

version=$(node -p 'require(process.argv[1]).devDependencies.typescript' "$here/package.json")
cache="${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/clients-node/typescript-$version"
tsc="$cache/node_modules/typescript/bin/tsc"
if [[ ! -x $tsc ]]; then
	echo "clients/node: installing typescript@$version into $cache" >&2
	rm -rf "$cache.tmp"
	mkdir -p "$cache.tmp"
	npm install --prefix "$cache.tmp" --no-save --no-audit --no-fund --ignore-scripts --loglevel=error "typescript@$version" >&2
	rm -rf "$cache"
	mv "$cache.tmp" "$cache"
fi
echo "clients/node: tsc --strict on the declarations (test/types.ts)" >&2
node "$tsc" -p "$here/tsconfig.json"
echo "clients/node: node --test (sidecar $sidecar)" >&2
cd "$here"
KUBEFLAKE_SIDECAR_BIN=$sidecar node --test test/*.test.js
