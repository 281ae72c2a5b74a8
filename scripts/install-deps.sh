#!/usr/bin/env bash
# Installs the Debian packages the tests need, only those missing. Idempotent.
#   faketime: runs the sidecar with a stepped wall clock (libfaketime).
set -euo pipefail
need=()
command -v faketime >/dev/null || need+=(faketime)
command -v openssl >/dev/null || need+=(openssl)
[[ ${#need[@]} -eq 0 ]] && exit 0
echo "install-deps: installing ${need[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
