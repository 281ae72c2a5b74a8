# Which pin set build.sh and update.sh work on (sourced, not run). A pin set is a
# directory with versions.env (the pins and COMMANDS, the binaries to build) and the
# go.mod, go.sum and tools.go that update.sh generates from it:
#   (no argument)  e2e/controlplane/         the newest Kubernetes: everything the tests use
#   oldest         e2e/controlplane/oldest/  the oldest Kubernetes the docs claim: the
#                                            control plane only (no node, no helm)
#
#   pin_set NAME   cd to the set's directory, source its versions.env, set $set_suffix
#                  (the Go module path's suffix, e.g. /oldest)
pin_set() {
	case ${1:-} in
	"") set_suffix="" ;;
	oldest) set_suffix=/oldest ;;
	*)
		echo "${0##*/}: unknown pin set '$1' (the sets: none for the newest, 'oldest')" >&2
		exit 2
		;;
	esac
	cd "$(dirname "${BASH_SOURCE[0]}")$set_suffix"
	# shellcheck source=versions.env
	source ./versions.env
}
