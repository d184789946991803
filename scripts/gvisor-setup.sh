#!/usr/bin/env bash
# Builds gVisor's runsc from the Go module proxy, installs it into
# /usr/local/bin and registers it as a Docker runtime. (containerd runs runsc
# through its runc v2 shim with a wrapper that scripts/containerd-setup.sh
# writes: gVisor's own containerd-shim-runsc-v1 does not work with
# containerd 1.6 here, so it is not built.) Run after scripts/docker-setup.sh. Idempotent: with the
# cache warm and the daemon already configured it only checks (under a
# second); a cold build takes 4-10 minutes for runsc (2 cores, depending on
# load).
#
# Builds are cached in $GVISOR_CACHE/bin (default /var/cache/sandboxd/gvisor)
# and keyed by the module version embedded in each binary (go version -m), so
# bumping GVISOR_VERSION rebuilds and nothing else does.
#
# dockerd picks up the runtime through a configuration reload (SIGHUP), which
# keeps running containers alive; only if that does not register runsc is
# dockerd restarted, the way scripts/docker-setup.sh starts it.
#
# --build-only: only build (or find cached) runsc; needs Go, not dockerd, so
# scripts/test.sh runs it in the background while the images build.
#
# Env: GVISOR_VERSION, GVISOR_CACHE, DOCKERD_LOG (default /var/log/dockerd.log),
#      DOCKER_WAIT (seconds, default 60).
set -euo pipefail

version=${GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
cache=${GVISOR_CACHE:-/var/cache/sandboxd/gvisor}
log=${DOCKERD_LOG:-/var/log/dockerd.log}
wait_s=${DOCKER_WAIT:-60}
daemon_json=/etc/docker/daemon.json
export PATH="/usr/local/go/bin:$PATH"

# runsc flags for every Docker sandbox:
#   --platform=systrap  no KVM needed (/dev/kvm exists on these machines, but
#                       sandboxes fail to start with --platform=kvm)
#   --host-uds=all      the agent's socket (created inside) must be visible
#                       on the host, and the egress socket (created on the
#                       host) must be connectable from inside
#   --oci-seccomp       apply the container's OCI seccomp profile inside the
#                       sandbox (gVisor ignores it otherwise). Every
#                       SCMP_ACT_ERRNO rule then answers EPERM whatever its
#                       errnoRet; runner/docker allows clone3 under gVisor
#                       for that reason (see runner/docker/gvisor.go).
runtime_args='["--platform=systrap", "--host-uds=all", "--oci-seccomp"]'

docker_bin() {
	if [ -x /usr/bin/docker ]; then echo /usr/bin/docker; else command -v docker; fi
}
DOCKER=$(docker_bin)

# 1. Build (or reuse) the binaries.
cached_version() { # $1 binary → module version embedded in it, or nothing
	[ -x "$1" ] || return 0
	go version -m "$1" 2>/dev/null | awk '$1 == "mod" && $2 == "gvisor.dev/gvisor" { print $3 }'
}
build() { # $1 package, $2 binary name
	local bin=$cache/bin/$2
	if [ "$(cached_version "$bin")" = "$version" ]; then
		return 0
	fi
	echo "gvisor-setup: building $1@$version (several minutes)" >&2
	mkdir -p "$cache/bin"
	local start=$SECONDS
	# Outside any module, so the project's go.mod does not interfere.
	(cd / && GOBIN="$cache/bin" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "$1@$version")
	echo "gvisor-setup: built $2 in $((SECONDS - start))s" >&2
}
build gvisor.dev/gvisor/runsc runsc
if [ "${1:-}" = --build-only ]; then
	echo "gvisor-setup: runsc $version built (cached in $cache/bin)"
	exit 0
fi

installed=()
for b in runsc; do
	if ! cmp -s "$cache/bin/$b" "/usr/local/bin/$b"; then
		install -m 0755 "$cache/bin/$b" "/usr/local/bin/$b.tmp"
		mv -f "/usr/local/bin/$b.tmp" "/usr/local/bin/$b"
		installed+=("$b")
	fi
done

# 2. Register runsc with dockerd: merge into daemon.json, keeping other keys.
mkdir -p "$(dirname "$daemon_json")"
current='{}'
if [ -s "$daemon_json" ]; then
	current=$(cat "$daemon_json")
fi
want=$(jq --argjson args "$runtime_args" \
	'.runtimes.runsc = {"path": "/usr/local/bin/runsc", "runtimeArgs": $args}' <<<"$current")
changed=no
if [ "$(jq -S . <<<"$current")" != "$(jq -S . <<<"$want")" ]; then
	printf '%s\n' "$want" >"$daemon_json.tmp"
	mv -f "$daemon_json.tmp" "$daemon_json"
	changed=yes
fi

runsc_registered() {
	"$DOCKER" info -f '{{json .Runtimes}}' 2>/dev/null | jq -e 'has("runsc")' >/dev/null 2>&1
}
# runsc args as the daemon reports them (the reload or restart took effect).
runsc_args_live() {
	"$DOCKER" info -f '{{json .Runtimes}}' 2>/dev/null | jq -c '.runsc.runtimeArgs // .runsc.Args // empty' 2>/dev/null
}
wait_for() { # $1 predicate, $2 seconds
	for _ in $(seq 1 "$(($2 * 4))"); do
		"$1" && return 0
		sleep 0.25
	done
	return 1
}
args_match() { [ "$(runsc_args_live)" = "$(jq -c . <<<"$runtime_args")" ]; }
daemon_up() { "$DOCKER" info >/dev/null 2>&1; }

if ! daemon_up; then
	echo "gvisor-setup: dockerd is not running (run scripts/docker-setup.sh first)" >&2
	exit 1
fi
reloaded=no
if [ "$changed" = yes ] || ! runsc_registered || ! args_match; then
	pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -x dockerd | head -1 || true)
	if [ -n "$pid" ] && kill -HUP "$pid" 2>/dev/null && wait_for args_match 10; then
		reloaded=sighup
	else
		echo "gvisor-setup: configuration reload did not register runsc; restarting dockerd" >&2
		if [ -n "$pid" ]; then
			kill -TERM "$pid" 2>/dev/null || true
			for _ in $(seq 1 $((wait_s * 4))); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.25
			done
		fi
		rm -f /var/run/docker.pid
		[ -S /var/run/docker.sock ] && rm -f /var/run/docker.sock
		setsid dockerd >>"$log" 2>&1 </dev/null &
		wait_for daemon_up "$wait_s" || {
			echo "gvisor-setup: dockerd not ready after ${wait_s}s; last log lines:" >&2
			tail -n 20 "$log" >&2 || true
			exit 1
		}
		reloaded=restart
	fi
fi
if ! wait_for runsc_registered "$wait_s"; then
	echo "gvisor-setup: dockerd does not list the runsc runtime; last log lines:" >&2
	tail -n 20 "$log" >&2 || true
	exit 1
fi

echo "gvisor-setup: ok (runsc $version in /usr/local/bin; installed=[${installed[*]}] daemon.json changed=$changed reload=$reloaded; runsc args $(runsc_args_live))"
