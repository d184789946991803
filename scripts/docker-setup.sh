#!/usr/bin/env bash
# Installs and starts Docker (Debian's docker.io) on a fresh Debian 12 machine
# without systemd. Idempotent: when everything is already there it only checks
# and prints the summary line (well under a second).
#
# Env: DOCKERD_LOG (default /var/log/dockerd.log), DOCKER_WAIT (seconds, default 60).
set -euo pipefail

log=${DOCKERD_LOG:-/var/log/dockerd.log}
wait_s=${DOCKER_WAIT:-60}
sock=/var/run/docker.sock

# Prefer Debian's client: a foreign /usr/local/bin/docker (e.g. a newer static
# CLI) may shadow it and tries to use buildx/BuildKit, which is not installed.
docker_bin() {
	if [ -x /usr/bin/docker ]; then echo /usr/bin/docker; else command -v docker; fi
}

# 1. Packages (only the missing ones; dpkg-query is exact, command -v is not:
#    /usr/local/bin/docker may exist without the daemon).
need=()
for p in docker.io containerd runc debootstrap; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		need+=("$p")
	fi
done
if [ "${#need[@]}" -gt 0 ]; then
	echo "docker-setup: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	# The package's postinst tries to start the service; without systemd/
	# sysvinit running that must be a no-op, not an error.
	policy=/usr/sbin/policy-rc.d
	created_policy=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy"
		chmod +x "$policy"
		created_policy=1
	fi
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	[ "$created_policy" = 1 ] && rm -f "$policy"
fi

DOCKER=$(docker_bin)

daemon_up() { "$DOCKER" info >/dev/null 2>&1; }
# A live process, not a zombie (kill -0 and pgrep both accept zombies: a
# killed dockerd nobody reaped would look like one still starting).
alive() { [ -n "$1" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ] && kill -0 "$1" 2>/dev/null; }

# 2. Daemon: never start a second one. A live socket or a live dockerd process
#    (maybe still starting) means: just wait for it.
started=no
if ! daemon_up; then
	pid=""
	if [ -f /var/run/docker.pid ]; then
		pid=$(cat /var/run/docker.pid 2>/dev/null || true)
		if [ -n "$pid" ] && ! alive "$pid"; then
			pid="" # stale pid file
		fi
	fi
	if [ -z "$pid" ]; then
		for p in $(pgrep -x dockerd || true); do
			if alive "$p"; then pid=$p; break; fi
		done
	fi
	if [ -z "$pid" ]; then
		# Stale socket/pid from a dead daemon would make dockerd refuse to start.
		rm -f /var/run/docker.pid
		[ -S "$sock" ] && rm -f "$sock"
		# dockerd uses the system containerd whenever its socket file
		# exists, and fails after a minute when nothing answers there (a
		# containerd that died or was killed leaves the file behind).
		# A stale file goes, so dockerd starts its own containerd;
		# scripts/containerd-setup.sh starts the system one later.
		csock=/run/containerd/containerd.sock
		if [ -S "$csock" ] && ! ctr -a "$csock" --timeout 2s version >/dev/null 2>&1; then
			echo "docker-setup: removing stale $csock (no containerd answers)" >&2
			rm -f "$csock" "$csock.ttrpc"
		fi
		# Plain defaults: keeps/creates docker0 (never --bridge=none, which
		# deletes an existing docker0). setsid detaches it from our session so
		# it survives the calling CI step.
		setsid dockerd >>"$log" 2>&1 </dev/null &
		started=yes
	fi
	for _ in $(seq 1 "$((wait_s * 4))"); do
		daemon_up && break
		sleep 0.25
	done
	if ! daemon_up; then
		echo "docker-setup: dockerd not ready after ${wait_s}s; last log lines:" >&2
		tail -n 20 "$log" >&2 || true
		exit 1
	fi
fi

sv=$("$DOCKER" version -f '{{.Server.Version}}' 2>/dev/null || echo '?')
drv=$("$DOCKER" info -f '{{.Driver}}/{{.CgroupDriver}} cgroup v{{.CgroupVersion}}' 2>/dev/null || echo '?')
echo "docker-setup: ok (dockerd $sv, $drv, started=$started, client $DOCKER, debootstrap $(dpkg-query -W -f='${Version}' debootstrap))"
