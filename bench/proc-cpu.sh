# shellcheck shell=bash
# Sourced by the benchmarks that read a process's CPU time (through bench/node-chart.sh for
# the node's, and by bench/sidecar-start.sh and bench/sidecar-idle.sh), from the
# repository's root. The one home for reading it:
#
#   schedstat_ns PID        the CPU time of process PID so far, ns, summed over its threads
#                           (user and kernel; 0 if it has gone). Fine-grained, but threads
#                           that have exited are no longer counted: for a short process
#                           (a sidecar) or a short window
#   stat_ms PID             the CPU time of process PID so far, ms (utime and stime of
#                           /proc/PID/stat, in clock ticks; 0 if it has gone). Coarse, but it
#                           keeps the time of threads that have exited: for a long-running
#                           daemon (containerd starts and ends threads) over longer windows

schedstat_ns() {
	{ cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{ns += $1} END {printf "%.0f", ns}'
}

stat_ms() {
	{ sed 's/.*) //' "/proc/$1/stat" 2>/dev/null || true; } |
		awk -v hz="$(getconf CLK_TCK)" '{ms = ($12 + $13) * 1000 / hz} END {printf "%.0f", ms}'
}
