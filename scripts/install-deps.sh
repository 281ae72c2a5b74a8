#!/usr/bin/env bash
# Installs the Debian packages the tests need, only those missing. Idempotent.
#   faketime: runs the sidecar with a stepped wall clock (libfaketime).
#   openssl: inspects certificates in the webhook tests.
#   prometheus: its promtool checks and unit-tests the chart's alerts and dashboard
#     queries (charts/kubeflake/tests/promtool.sh); jq extracts the dashboard's queries;
#     the server itself runs in e2e/tests/prometheus.rs (e2e/src/prometheus.rs).
#   python3-venv: a virtualenv for Schemathesis and openapi-spec-validator, which fuzz
#     the sidecar against docs/openapi.yaml (scripts/check-openapi.sh).
#   The test node (e2e/node/node.sh, e2e/src/node.rs):
#     containerd, runc, containernetworking-plugins: the container runtime and CNI bridge;
#     iptables, iproute2, conntrack: its network rules, bridge and kube-proxy's needs;
#     buildah: builds the images from the Dockerfile (e2e/images/build.sh);
#     libc6-dev: the static C library for the fully static binaries in those images;
#     ca-certificates: the CA roots copied into the images.
#   g++: compiles libFuzzer's C++ for the fuzzers (libfuzzer-sys, scripts/fuzz.sh).
#   The client libraries' toolchains (clients/test.sh): openjdk-17-jdk-headless and maven
#     (clients/java), nodejs 20+ (clients/node). Go is not installed here: Debian's is older
#     than the 1.21 that can fetch the toolchain the control plane pins
#     (e2e/controlplane/go.mod) as a module; a missing or older Go stops this script with
#     that message, before anything is built.
#   postgresql, mariadb-server, sqlite3: the databases `kubectl kubeflake sql`'s functions
#     are tested against (e2e/tests/sql_functions.rs). The test starts each server itself,
#     in a private temp directory; the packages must not start a system-wide one, so the
#     install runs with a policy-rc.d that forbids starting services (unless the machine
#     already has one, as Debian's container images do).
set -euo pipefail
need=()
have_cmd() { command -v "$1" >/dev/null; }
have_file() { [[ -e $1 ]]; }
have_cmd faketime || need+=(faketime)
have_cmd openssl || need+=(openssl)
have_cmd promtool && have_file /usr/bin/prometheus || need+=(prometheus)
have_cmd jq || need+=(jq)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
have_cmd containerd || need+=(containerd)
have_cmd runc || need+=(runc)
have_file /usr/lib/cni/bridge || need+=(containernetworking-plugins)
have_cmd iptables || need+=(iptables)
have_cmd ip || need+=(iproute2)
have_cmd conntrack || need+=(conntrack)
have_cmd buildah || need+=(buildah)
have_file /usr/lib/x86_64-linux-gnu/libc.a || need+=(libc6-dev)
have_file /etc/ssl/certs/ca-certificates.crt || need+=(ca-certificates)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)
have_file /usr/sbin/mariadbd || need+=(mariadb-server)
have_cmd sqlite3 || need+=(sqlite3)
have_cmd g++ || need+=(g++)
have_cmd javac || need+=(openjdk-17-jdk-headless)
have_cmd mvn || need+=(maven)
have_cmd node || need+=(nodejs)
go_cmd=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
go_minor=$("$go_cmd" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p' || true)
if [[ -z $go_minor || $go_minor -lt 21 ]]; then
  echo "install-deps: the tests need Go 1.21 or newer on PATH (or GO=/path/to/go); found: ${go_minor:+go1.$go_minor}${go_minor:-none}." >&2
  echo "install-deps: Go 1.21+ fetches the newer toolchain e2e/controlplane/go.mod asks for by itself." >&2
  exit 1
fi
[[ ${#need[@]} -eq 0 ]] && exit 0
echo "install-deps: installing ${need[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
$sudo apt-get update -qq
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  # Exit 101 = "action forbidden" (invoke-rc.d, deb-systemd-invoke): no package starts
  # its service during this install. Removed again however the install ends.
  printf '#!/bin/sh\n# install-deps.sh: no service starts during its install\nexit 101\n' |
    $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod 755 /usr/sbin/policy-rc.d
  trap '$sudo rm -f /usr/sbin/policy-rc.d' EXIT
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
