#!/usr/bin/env bash
# Stops the test cluster of scripts/k8s-setup.sh and removes what it made on
# the host: its pods (deleted through the API first, so the kubelet tears
# their networks down), every component by its recorded pid (never by
# name), leftover containers of its own containerd, mounts under its state
# directory, its pods' network namespaces, the bridge, the iptables chains
# and ipsets of kube-router, the kubelet and SBXK8S-GUARD, and its cgroups.
# The host's containerd and dockerd are not touched.
#
# Usage: scripts/k8s-down.sh [--purge]   (--purge also removes $K8S_STATE:
#        etcd's data, the PKI, the imported images)
# Env: K8S_STATE (default /var/lib/sandboxd-k8s).
set -uo pipefail

state=${K8S_STATE:-/var/lib/sandboxd-k8s}
sock=$state/containerd/containerd.sock
pki=$state/pki
bridge=sbxk8s0
cg=sandboxd-k8s
t0=$(date +%s)
say() { echo "k8s-down: [$(($(date +%s) - t0))s] $*"; }

pid_of() { cat "$state/run/$1.pid" 2>/dev/null; }
alive() { local p; p=$(pid_of "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }
stop() { # names...: SIGTERM to each, then SIGKILL to what still runs after 10s
	local n p i pids=()
	for n in "$@"; do
		if alive "$n"; then
			p=$(pid_of "$n")
			kill "$p" 2>/dev/null
			pids+=("$n:$p")
		fi
		rm -f "$state/run/$n.pid"
	done
	for i in $(seq 100); do
		local left=0
		for n in "${pids[@]}"; do kill -0 "${n#*:}" 2>/dev/null && left=1; done
		[ "$left" = 0 ] && break
		sleep 0.1
	done
	for n in "${pids[@]}"; do
		if kill -0 "${n#*:}" 2>/dev/null; then
			kill -9 "${n#*:}" 2>/dev/null
			say "killed -9 ${n%%:*} (${n#*:})"
		else
			say "stopped ${n%%:*} (${n#*:})"
		fi
	done
}
ctr_k8s() { ctr -a "$sock" -n k8s.io --timeout 10s "$@"; }

# 1. Pods: deleted through the API while the kubelet runs.
if alive apiserver && alive kubelet && [ -s "$pki/admin.crt" ]; then
	k() { curl -sS --max-time 10 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$@"; }
	for n in $(k https://127.0.0.1:16443/api/v1/pods | jq -r '.items[] | .metadata.namespace + "/" + .metadata.name' 2>/dev/null); do
		k -X DELETE "https://127.0.0.1:16443/api/v1/namespaces/${n%%/*}/pods/${n#*/}?gracePeriodSeconds=0" >/dev/null
	done
	for _ in $(seq 100); do
		[ -z "$(ctr_k8s tasks ls -q 2>/dev/null)" ] && break
		sleep 0.2
	done
fi

# 2. Components, the node's first.
stop kube-router kubelet workspace-csi
stop sched kcm
stop apiserver
stop etcd

# 3. What the kubelet left: tasks (and their shims), containers, sandboxes'
#    network namespaces.
netns=()
if alive containerd; then
	for c in $(ctr_k8s containers ls -q 2>/dev/null); do
		ns=$(ctr_k8s containers info "$c" 2>/dev/null | jq -r '.Spec.linux.namespaces[]? | select(.type == "network") | .path // empty' 2>/dev/null)
		[ -n "$ns" ] && netns+=("$ns")
		ctr_k8s tasks kill -s SIGKILL "$c" >/dev/null 2>&1
	done
	for c in $(ctr_k8s tasks ls -q 2>/dev/null); do
		for _ in $(seq 20); do ctr_k8s tasks delete "$c" >/dev/null 2>&1 && break; sleep 0.1; done
	done
	for c in $(ctr_k8s containers ls -q 2>/dev/null); do
		ctr_k8s containers delete "$c" >/dev/null 2>&1
	done
fi
stop containerd
# Shims of this containerd that outlived their task (a runsc sandbox the
# runc shim lost): each names our socket in its command line.
for d in /proc/[0-9]*; do
	if tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -q -- "containerd-shim.* -address $sock"; then
		kill -9 "${d#/proc/}" 2>/dev/null && say "killed a leftover shim (${d#/proc/})"
	fi
done

# 4. Mounts under the state directory (deepest first), the pods' netns.
findmnt -rn -o TARGET | grep "^$state/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
for n in $(printf '%s\n' "${netns[@]}" | sort -u); do
	case "$n" in /var/run/netns/cni-* | /run/netns/cni-*) umount "$n" 2>/dev/null; rm -f "$n" ;; esac
done

# 5. Network: the bridge (its veths went with the pods), iptables, ipsets.
ip link del "$bridge" 2>/dev/null
iptables -D FORWARD -j SBXK8S-GUARD 2>/dev/null
iptables -F SBXK8S-GUARD 2>/dev/null
iptables -X SBXK8S-GUARD 2>/dev/null
# kube-router (firewall-only): its --cleanup-config panics without IPVS.
for c in INPUT FORWARD OUTPUT; do
	iptables -S "$c" 2>/dev/null | grep -E 'kube-router|KUBE-ROUTER' | sed 's/^-A/-D/' | while read -r r; do eval iptables "$r"; done
done
for t in filter nat mangle; do
	for ch in $(iptables -t "$t" -S 2>/dev/null | awk '/^-N (KUBE-ROUTER-|KUBE-NWPLCY-|KUBE-POD-FW-|KUBE-SRC-)/{print $2}'); do iptables -t "$t" -F "$ch"; done
	for ch in $(iptables -t "$t" -S 2>/dev/null | awk '/^-N (KUBE-ROUTER-|KUBE-NWPLCY-|KUBE-POD-FW-|KUBE-SRC-)/{print $2}'); do iptables -t "$t" -X "$ch"; done
done
for s in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)'); do ipset destroy "$s" 2>/dev/null; done
# The kubelet's chains.
for ipt in iptables ip6tables; do
	for t in filter nat mangle; do
		$ipt -t "$t" -S 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j KUBE-' | sed 's/^-A/-D/' | while read -r r; do eval "$ipt" -t "$t" "$r"; done
		for ch in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
			$ipt -t "$t" -F "$ch" 2>/dev/null
			$ipt -t "$t" -X "$ch" 2>/dev/null
		done
	done
done

# 6. cgroups.
for h in /sys/fs/cgroup/*/; do
	[ -d "$h$cg" ] && find "$h$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
done

if [ "${1:-}" = --purge ]; then
	rm -rf "$state"
	say "removed $state"
fi
left=$(find /sys/fs/cgroup/*/ -maxdepth 1 -name "$cg" 2>/dev/null | wc -l)
say "done (cgroups left: $left; mounts left: $(findmnt -rn -o TARGET | grep -c "^$state/"))"
