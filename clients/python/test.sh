#!/usr/bin/env bash
# The Python client's own tests (pytest) against a real standalone sidecar.
#   clients/python/test.sh SIDECAR_BINARY
# pytest, SQLAlchemy and prometheus_client come from PyPI, pinned in requirements-test.txt,
# into a virtualenv under ~/.cache/kubeflake/clients-py (KUBEFLAKE_CACHE moves it), made
# once and made again only when that file changes. Prints the venv's python last.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sidecar=${1:?usage: clients/python/test.sh SIDECAR_BINARY}

venv="${KUBEFLAKE_CACHE:-$HOME/.cache/kubeflake}/clients-py/venv"
stamp="$venv/.kubeflake-requirements"
if [[ ! -f $stamp ]] || ! cmp -s "$stamp" "$here/requirements-test.txt"; then
	echo "clients/python: installing $(grep -cv '^#' "$here/requirements-test.txt") pinned packages into $venv" >&2
	rm -rf "$venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements-test.txt"
	cp "$here/requirements-test.txt" "$stamp"
fi
echo "clients/python: pytest (sidecar $sidecar)" >&2
cd "$here"
KUBEFLAKE_SIDECAR_BIN=$sidecar "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
