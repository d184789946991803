#!/usr/bin/env bash
# Starts sandboxd's own containerd (Debian's 1.6 package, no systemd) and
# imports the sandbox images into its "sandboxd" namespace. Idempotent and
# fast when warm: a running daemon is reused, archives are rebuilt only when
# the Docker image changed (scripts/build-images.sh caches by image id) and
# imported only when containerd lacks that image.
#
#   config  /etc/sandboxd/containerd.toml (root /var/lib/containerd,
#           state /run/containerd, socket /run/containerd/containerd.sock,
#           CRI disabled). dockerd's own containerd
#           (/var/run/docker/containerd/containerd.sock) is left alone.
#   gVisor  when runsc is installed (scripts/gvisor-setup.sh: /usr/local/bin/runsc
#           or /var/cache/sandboxd/gvisor/bin/runsc), writes the wrapper
#           /usr/local/bin/runsc-sandboxd (runsc --platform=systrap
#           --host-uds=all --oci-seccomp) that the runner's Runtime "runsc"
#           runs through the runc v2 shim (the runsc v1 shim needs
#           CAP_SYS_RESOURCE and containerd >= 1.7 here).
#
# Usage: scripts/containerd-setup.sh [--no-images]
# Env: CONTAINERD_LOG (default /var/log/sandboxd-containerd.log),
#      CONTAINERD_WAIT (seconds, default 30), OCI_DIR (default
#      /var/cache/sandboxd/oci), CONTAINERD_NAMESPACE (default sandboxd).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
conf_dir=/etc/sandboxd
conf=$conf_dir/containerd.toml
sock=/run/containerd/containerd.sock
log=${CONTAINERD_LOG:-/var/log/sandboxd-containerd.log}
wait_s=${CONTAINERD_WAIT:-30}
oci_dir=${OCI_DIR:-/var/cache/sandboxd/oci}
ns=${CONTAINERD_NAMESPACE:-sandboxd}
images=yes
[ "${1:-}" = --no-images ] && images=no

t0=$(date +%s)
say() { echo "containerd-setup: [$(($(date +%s) - t0))s] $*"; }

for bin in containerd ctr runc containerd-shim-runc-v2; do
	if ! command -v "$bin" >/dev/null; then
		echo "containerd-setup: $bin missing (run scripts/docker-setup.sh, which installs containerd and runc)" >&2
		exit 1
	fi
done

# 1. Config (rewritten only when it changes; a running daemon keeps the
#    old one until it restarts).
mkdir -p "$conf_dir"
new=$(
	cat <<EOF
# Written by sandboxd scripts/containerd-setup.sh; edits are overwritten.
version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "$sock"
EOF
)
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$new" ]; then
	printf '%s\n' "$new" >"$conf"
	say "wrote $conf"
fi

# 2. gVisor wrapper, when runsc is there.
runsc=""
for c in /usr/local/bin/runsc /var/cache/sandboxd/gvisor/bin/runsc; do
	if [ -x "$c" ]; then runsc=$c; break; fi
done
if [ -n "$runsc" ]; then
	wrapper=/usr/local/bin/runsc-sandboxd
	want=$(printf '#!/bin/sh\n# Written by sandboxd scripts/containerd-setup.sh.\nexec %s --platform=systrap --host-uds=all --oci-seccomp "$@"\n' "$runsc")
	if [ ! -x "$wrapper" ] || [ "$(cat "$wrapper")" != "$want" ]; then
		printf '%s\n' "$want" >"$wrapper.tmp"
		chmod 0755 "$wrapper.tmp"
		mv "$wrapper.tmp" "$wrapper"
		say "wrote $wrapper"
	fi
fi

# 3. Daemon: reuse a live one at our socket; never touch dockerd's.
up() { [ -S "$sock" ] && ctr -a "$sock" --timeout 2s version >/dev/null 2>&1; }
if ! up; then
	pidfile=/run/sandboxd-containerd.pid
	pid=$(cat "$pidfile" 2>/dev/null || true)
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q containerd "/proc/$pid/cmdline" 2>/dev/null; then
		say "containerd (pid $pid) is starting; waiting"
	else
		say "starting containerd --config $conf (log $log)"
		mkdir -p /run/containerd /var/lib/containerd
		nohup containerd --config "$conf" >>"$log" 2>&1 </dev/null &
		echo $! >"$pidfile"
	fi
	for _ in $(seq $((wait_s * 10))); do
		up && break
		sleep 0.1
	done
	if ! up; then
		tail -n 30 "$log" >&2
		echo "containerd-setup: containerd did not answer at $sock within ${wait_s}s" >&2
		exit 1
	fi
fi

# 4. Images: docker archives from the offline build, imported when missing
#    or changed (the archive's image id is remembered next to it).
if [ "$images" = yes ]; then
	if ! bash "$root/scripts/build-images.sh" --oci "$oci_dir" >/tmp/sandboxd-build-images.$$ 2>&1; then
		cat /tmp/sandboxd-build-images.$$ >&2
		rm -f /tmp/sandboxd-build-images.$$
		exit 1
	fi
	rm -f /tmp/sandboxd-build-images.$$
	for name in base python; do
		archive=$oci_dir/sandboxd-$name.tar
		id=$(cat "$oci_dir/sandboxd-$name.id" 2>/dev/null || true)
		ref=docker.io/sandboxd/$name:latest
		stamp=/var/lib/containerd/sandboxd-imported-$name.id
		if [ -n "$id" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$id" ] &&
			ctr -a "$sock" -n "$ns" images check "name==$ref" 2>/dev/null | grep -q complete; then
			continue
		fi
		say "import $archive -> $ref (namespace $ns, overlayfs)"
		# import unpacks into the snapshotter too: the first sandbox
		# does not pay for it.
		ctr -a "$sock" -n "$ns" images import --snapshotter overlayfs "$archive" >/dev/null
		echo "$id" >"$stamp"
	done
fi

say "ok: containerd $(containerd --version | awk '{print $3}') at $sock; images: $(ctr -a "$sock" -n "$ns" images ls -q 2>/dev/null | grep sandboxd | tr '\n' ' ')"
