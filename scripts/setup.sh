#!/usr/bin/env bash
# Installs what sandboxd's tests need on a fresh Debian 12 machine.
# Idempotent and fast when everything is already there.
set -euo pipefail

need=()
command -v /usr/bin/python3 >/dev/null 2>&1 || need+=(python3)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v setsid >/dev/null 2>&1 || need+=(util-linux)
command -v ps >/dev/null 2>&1 || need+=(procps)
[ -x /usr/bin/chromium ] || need+=(chromium) # integration/dashboard_test.go (headless)
/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1 || need+=(python3-matplotlib) # the local runner's REPL artifacts (runnertest)
/usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv) # clients/python's install test (a venv of Debian's python)
/usr/bin/python3 -c 'import setuptools' >/dev/null 2>&1 || need+=(python3-setuptools) # pip install --no-build-isolation ./clients/python
/usr/bin/python3 -c 'import wheel' >/dev/null 2>&1 || need+=(python3-wheel) # setuptools builds the wheel pip installs
/usr/bin/python3 -c 'import mypy' >/dev/null 2>&1 || need+=(python3-mypy) # clients/python is checked with mypy --strict
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap) # the local runner's benchmark baseline
[ -x /usr/bin/linux.uml ] || need+=(user-mode-linux) # the local runner's cgroup v2 test (a v2 kernel as a process)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql) # the Postgres store's tests (store/pgtest starts its own server; no systemd)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose) # integration/compose_test.go: Debian's docker-compose 1.29
command -v ipset >/dev/null 2>&1 || need+=(ipset) # scripts/k8s-setup.sh: kube-router's NetworkPolicy sets
command -v openssl >/dev/null 2>&1 || need+=(openssl) # scripts/k8s-setup.sh: the test cluster's certificates
command -v jq >/dev/null 2>&1 || need+=(jq) # scripts/k8s-setup.sh, scripts/k8s/runc-masked.sh

if [ "${#need[@]}" -gt 0 ]; then
	echo "setup: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	if [[ " ${need[*]} " == *" postgresql "* ]]; then
		# Tests start their own server in a temp dir: no system cluster.
		mkdir -p /etc/postgresql-common/createcluster.d
		echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/sandboxd.conf
	fi
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	else
		echo "setup: Go toolchain not found (expected /usr/local/go)" >&2
		exit 1
	fi
fi
echo "setup: ok ($(go version | cut -d' ' -f3), $(/usr/bin/python3 --version), $(promtool --version 2>&1 | head -1 | cut -d' ' -f1-3))"
