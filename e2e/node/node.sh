#!/usr/bin/env bash
# The host side of the e2e test node: its network, and taking all of it away again.
#
#   e2e/node/node.sh net-up      firewall rule first, then the bridge, routes and sysctls
#   e2e/node/node.sh teardown    remove everything a node made (idempotent; works after
#                                a killed run, with or without state files)
#   e2e/node/node.sh teardown-orphan
#                                the same, unless the process that brought the node up
#                                (its owner: a test binary or `e2e/cluster`'s runner) still
#                                runs: for `e2e/cluster down`, which must never take away a
#                                node another run has just brought up
#   e2e/node/node.sh watchdog    run teardown once standard input closes (the harness
#                                keeps a pipe open; any death of the harness closes it)
#   e2e/node/node.sh leftovers   print what a node left behind; exit 1 if anything
#   e2e/node/node.sh check-net   print the network rules in force; exit 1 if one is missing
#
# The processes (containerd, kubelet, kube-proxy, ...) are started by the Rust harness
# (e2e/src/node.rs); this script owns everything that outlives a process: interfaces,
# routes, firewall rules, sysctls, mounts, cgroups, network namespaces, and the container
# shims that containerd deliberately detaches from itself.
#
# Addresses (docs/e2e-node.md explains them):
#   bridge kubeflake0 10.244.0.1/24   pods 10.244.0.0/24, API server, kubelet and DNS bind here
#   Services 10.96.0.0/16             routed to the bridge, kube-proxy's iptables rules
# No masquerade, no default route in pods, forwarding dropped unless both ends are on the
# bridge (mangle table, before kube-proxy's filter rules can accept anything).
set -euo pipefail

BRIDGE=kubeflake0
BRIDGE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
ROOT=/var/lib/kubeflake-node
RUN=/run/kubeflake-node
CGROUP_PARENT=kubeflake
CHAIN=KUBEFLAKE-FORWARD
SAVED_SYSCTLS=/run/kubeflake-node.sysctls
# The PID of the process that brought the current node up (net-up's caller), written under
# the lock: `teardown-orphan` leaves a node alone while its owner runs.
OWNER=/run/kubeflake-node.owner
# Sysctls the node changes (by itself or through kubelet and kube-proxy); their values
# before the first change are saved and restored by teardown.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables
	net.bridge.bridge-nf-call-ip6tables vm.overcommit_memory kernel.panic
	kernel.panic_on_oops net.ipv4.conf.all.route_localnet)

log() { echo "node.sh: $*" >&2; }

need_root() {
	[[ $(id -u) -eq 0 ]] || {
		log "the test node needs root (it creates a bridge, firewall rules and cgroups)"
		exit 1
	}
}

save_sysctls() {
	[[ -f $SAVED_SYSCTLS ]] && return 0
	local key value
	: >"$SAVED_SYSCTLS.tmp"
	for key in "${SYSCTLS[@]}"; do
		value=$(sysctl -n "$key" 2>/dev/null) || continue
		echo "$key=$value" >>"$SAVED_SYSCTLS.tmp"
	done
	mv "$SAVED_SYSCTLS.tmp" "$SAVED_SYSCTLS"
}

restore_sysctls() {
	[[ -f $SAVED_SYSCTLS ]] || return 0
	local line
	while IFS= read -r line; do
		sysctl -q -w "$line" >/dev/null 2>&1 || log "could not restore $line"
	done <"$SAVED_SYSCTLS"
	rm -f "$SAVED_SYSCTLS"
}

net_up() {
	need_root
	save_sysctls
	# 1. The firewall rule, before any interface or process exists: in the mangle table's
	#    FORWARD chain, which runs before the filter table's (where kube-proxy and the CNI
	#    plugins add ACCEPT rules), forwarded packets pass only from bridge to bridge.
	iptables -t mangle -N "$CHAIN" 2>/dev/null || iptables -t mangle -F "$CHAIN"
	iptables -t mangle -A "$CHAIN" -i "$BRIDGE" -o "$BRIDGE" -j RETURN
	iptables -t mangle -A "$CHAIN" -j DROP
	iptables -t mangle -C FORWARD -j "$CHAIN" 2>/dev/null || iptables -t mangle -I FORWARD 1 -j "$CHAIN"
	# IPv6: the node has none; drop any forwarding to or from the bridge all the same.
	ip6tables -t mangle -N "$CHAIN" 2>/dev/null || ip6tables -t mangle -F "$CHAIN"
	ip6tables -t mangle -A "$CHAIN" -i "$BRIDGE" -j DROP
	ip6tables -t mangle -A "$CHAIN" -o "$BRIDGE" -j DROP
	ip6tables -t mangle -C FORWARD -j "$CHAIN" 2>/dev/null || ip6tables -t mangle -I FORWARD 1 -j "$CHAIN"

	# 2. The bridge, with the node's only address. The CNI bridge plugin attaches pods.
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
	fi
	ip addr replace "$BRIDGE_IP/24" dev "$BRIDGE"
	sysctl -q -w "net.ipv6.conf.$BRIDGE.disable_ipv6=1" >/dev/null 2>&1 || true
	ip link set "$BRIDGE" up
	# 3. Services live on the bridge too: host traffic to a Service address that no
	#    kube-proxy rule rewrote goes nowhere but the bridge.
	ip route replace "$SERVICE_CIDR" dev "$BRIDGE" src "$BRIDGE_IP"
	# 4. Routing between pods through Service addresses: bridged frames must pass
	#    iptables (kube-proxy's DNAT and its reverse), and the host must route from the
	#    bridge back to the bridge. The mangle rule above keeps that the only forwarding.
	sysctl -q -w net.bridge.bridge-nf-call-iptables=1 >/dev/null
	sysctl -q -w net.ipv4.ip_forward=1 >/dev/null
	mkdir -p "$ROOT" "$RUN"
	# 5. The kubelet's cgroup root (cgroupRoot: /kubeflake) must exist in every v1
	#    hierarchy before it starts; every pod cgroup lives below it.
	local hierarchy
	for hierarchy in /sys/fs/cgroup/*/; do
		[[ -f ${hierarchy}cgroup.procs ]] && mkdir -p "${hierarchy}$CGROUP_PARENT"
	done
	# cpuset: a new v1 cpuset cgroup starts with no CPUs and no memory nodes.
	local cpuset=/sys/fs/cgroup/cpuset
	if [[ -d $cpuset/$CGROUP_PARENT ]]; then
		cat "$cpuset/cpuset.cpus" >"$cpuset/$CGROUP_PARENT/cpuset.cpus"
		cat "$cpuset/cpuset.mems" >"$cpuset/$CGROUP_PARENT/cpuset.mems"
	fi
}

# Every mount point under the node's directories and its network namespaces, deepest first.
node_mounts() {
	awk '{print $5}' /proc/self/mountinfo |
		grep -E "^($ROOT|$RUN)(/|$)|^/(var/)?run/netns/cni-" |
		awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2- || true
}

# Processes that belong to the node: anything in its cgroups, container shims serving its
# containerd, the node's own daemons, and the OCI registry on its bridge.
node_pids() {
	local dir
	for dir in /sys/fs/cgroup/*/"$CGROUP_PARENT"; do
		[[ -d $dir ]] || continue
		find "$dir" -name cgroup.procs -exec cat {} + 2>/dev/null || true
	done
	local pid cmd
	for pid in /proc/[0-9]*; do
		cmd=$( { tr '\0' ' ' <"$pid/cmdline"; } 2>/dev/null) || continue
		case "$cmd" in
		*containerd-shim*"$RUN/containerd.sock"* | *"--root-dir=$ROOT/"* | *"$ROOT/"*config*) echo "${pid#/proc/}" ;;
		# The registry on the bridge (e2e/src/registry.rs), its blobs under $ROOT.
		*"registry serve --address $BRIDGE_IP:"*) echo "${pid#/proc/}" ;;
		esac
	done
}

node_cgroups() {
	local dir
	for dir in /sys/fs/cgroup/*/"$CGROUP_PARENT"; do
		[[ -d $dir ]] && find "$dir" -depth -type d
	done
	return 0
}

node_links() {
	ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 |
		while read -r link; do
			if [[ $link == "$BRIDGE" ]] || ip -o link show "$link" 2>/dev/null | grep -q "master $BRIDGE "; then
				echo "$link"
			fi
		done
}

# Rules and chains a node made: ours (KUBEFLAKE-*), kube-proxy's and kubelet's (KUBE-*),
# and the CNI plugins' (CNI-*), in every table of both families.
node_rules() {
	local cmd
	for cmd in iptables-save ip6tables-save; do
		"$cmd" 2>/dev/null | grep -E 'KUBE-|KUBEFLAKE-|CNI-' | sed "s/^/${cmd%-save}: /" || true
	done
}

remove_rules() {
	local family
	for family in iptables ip6tables; do
		# Rewrite each table without our chains and without rules that use them.
		"$family-save" 2>/dev/null | awk '
			/^\*/ { print; next }
			/^:(KUBE-|KUBEFLAKE-|CNI-)/ { next }
			/^-A (KUBE-|KUBEFLAKE-|CNI-)/ { next }
			/-j (KUBE-|KUBEFLAKE-|CNI-)/ { next }
			/-g (KUBE-|KUBEFLAKE-|CNI-)/ { next }
			{ print }' | "$family-restore" 2>/dev/null || log "$family-restore failed; rules left: $(node_rules | wc -l)"
	done
}

teardown() {
	need_root
	local pid mount dir link attempt
	# Processes first (twice: a dying shim may have just started a child).
	for attempt in 1 2 3; do
		mapfile -t pids < <(node_pids | sort -u)
		[[ ${#pids[@]} -eq 0 ]] && break
		for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
		sleep 0.5
	done
	for mount in $(node_mounts); do
		umount "$mount" 2>/dev/null || umount -l "$mount" 2>/dev/null || log "cannot unmount $mount"
	done
	rm -f /run/netns/cni-* 2>/dev/null || true
	for dir in $(node_cgroups); do
		rmdir "$dir" 2>/dev/null || log "cannot remove cgroup $dir"
	done
	for link in $(node_links); do
		[[ $link == "$BRIDGE" ]] || ip link del "$link" 2>/dev/null || true
	done
	ip route del "$SERVICE_CIDR" 2>/dev/null || true
	ip link del "$BRIDGE" 2>/dev/null || true
	remove_rules
	restore_sysctls
	rm -rf "$ROOT" "$RUN" /var/lib/cni/networks/kubeflake /var/lib/cni/results/kubeflake-* 2>/dev/null || true
	rm -f "$OWNER"
}

# Under the lock (so no net-up runs between the look and the teardown): a node whose owner
# still runs is someone else's, in use. Without this, a `down` issued as a new run starts
# could remove the new run's bridge under its API server, whose own requests to the bridge
# address would then follow the host's default route off the machine.
teardown_orphan() {
	local owner
	owner=$(cat "$OWNER" 2>/dev/null || true)
	if [[ $owner =~ ^[0-9]+$ ]] && kill -0 "$owner" 2>/dev/null; then
		log "the node belongs to running process $owner ($(tr '\0' ' ' <"/proc/$owner/cmdline" 2>/dev/null | cut -c1-80)); left alone"
		return 0
	fi
	stop_watchdogs
	teardown
}

leftovers() {
	local found=0 what
	while IFS= read -r what; do
		[[ -n $what ]] || continue
		echo "$what"
		found=1
	done < <(
		node_pids | sort -u | sed 's/^/process /'
		node_mounts | sed 's/^/mount /'
		node_cgroups | sed 's/^/cgroup /'
		node_links | sed 's/^/interface /'
		ip route show "$SERVICE_CIDR" 2>/dev/null | sed 's/^/route /'
		node_rules | sed 's/^/rule /'
		ls -d /run/netns/cni-* "$ROOT" "$RUN" "$SAVED_SYSCTLS" 2>/dev/null | sed 's/^/path /'
	)
	return $found
}

check_net() {
	local failed=0
	check() {
		local what=$1
		shift
		if "$@" >/dev/null 2>&1; then echo "ok   $what"; else
			echo "FAIL $what"
			failed=1
		fi
	}
	check "mangle FORWARD jumps to $CHAIN first" \
		bash -c "iptables -t mangle -S FORWARD | sed -n 2p | grep -qx -- '-A FORWARD -j $CHAIN'"
	check "$CHAIN lets only bridge-to-bridge through, then drops" \
		bash -c "diff <(iptables -t mangle -S $CHAIN) <(printf '%s\n' '-N $CHAIN' '-A $CHAIN -i $BRIDGE -o $BRIDGE -j RETURN' '-A $CHAIN -j DROP')"
	check "no SNAT or MASQUERADE except kube-proxy's for its marked packets" \
		bash -c "! iptables -t nat -S | grep -E -- '-j (MASQUERADE|SNAT)' | grep -v -- '^-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE'"
	check "Service range $SERVICE_CIDR routed to $BRIDGE" \
		bash -c "ip route show $SERVICE_CIDR | grep -q 'dev $BRIDGE'"
	check "bridge $BRIDGE has $BRIDGE_IP" bash -c "ip -4 -o addr show dev $BRIDGE | grep -q ' $BRIDGE_IP/'"
	return $failed
}

# One node at a time: every change to the host runs under this lock, held from here
# until the script exits.
locked() {
	exec 8>/run/kubeflake-node.lock
	flock 8
	"$@"
}

# Watchdogs of earlier nodes: their node is torn down (or replaced) by whoever called us.
stop_watchdogs() {
	local pid cmd
	for pid in /proc/[0-9]*; do
		pid=${pid#/proc/}
		[[ $pid == "$$" ]] && continue
		cmd=$( { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || continue
		[[ $cmd == *"node.sh watchdog"* ]] && kill -KILL "$pid" 2>/dev/null || true
	done
}

watchdog() {
	# Standard input is a pipe whose write end only the harness holds: EOF means it is gone.
	cat >/dev/null || true
	log "harness gone; tearing the node down"
	locked teardown
}

case "${1:-}" in
net-up)
	# The lock stays held until this script exits (fd 8 stays open).
	locked stop_watchdogs
	teardown
	net_up
	echo "$PPID" >"$OWNER"
	;;
teardown)
	locked stop_watchdogs
	teardown
	;;
teardown-orphan) locked teardown_orphan ;;
watchdog) watchdog ;;
leftovers) leftovers ;;
check-net) check_net ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
