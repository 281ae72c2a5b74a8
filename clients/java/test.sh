#!/usr/bin/env bash
# The Java clients' own tests (Maven, Java 17), against real standalone sidecars that the
# tests start from SIDECAR_BINARY; the Hibernate test also starts a throwaway PostgreSQL
# (Debian's postgresql package) on a loopback port.
#
#   clients/java/test.sh SIDECAR_BINARY
#
# clients/test.sh calls it, then runs the conformance suite with the driver this build
# leaves in kubeflake-client/target/test-classes. Maven's local repository (~/.m2) is
# filled on the first run and only read afterwards.
set -euo pipefail
[[ $# -eq 1 && -x $1 ]] || {
	echo "usage: clients/java/test.sh SIDECAR_BINARY" >&2
	exit 2
}
export KUBEFLAKE_SIDECAR_BIN
KUBEFLAKE_SIDECAR_BIN=$(realpath "$1")
cd "$(dirname "$0")"
mvn -B -q -Dsurefire.printSummary=true test
echo "clients/java: every test passed (reports in */target/surefire-reports)"
