#!/usr/bin/env bash
# Builds the images of the repository's docker-compose.yml offline, FROM local images
# only: sandboxd/sandboxd:local (static binaries built here, on top of
# sandboxd/base:latest), sandboxd/prometheus:local (Debian's prometheus
# package on top of sandboxd/debian:bookworm; apt inside docker build
# reaches the Debian mirror) and, for docker-compose.replicas.yml,
# sandboxd/postgres:local (Debian's postgresql the same way). Run
# scripts/docker-setup.sh and scripts/build-images.sh first. Grafana is not
# built: see README.md.
#
# Env: SANDBOXD_COMPOSE_DATA, the data dir the compose file binds (default
# /var/lib/sandboxd-compose), made a shared mount here;
# SANDBOXD_COMPOSE_REPLICAS=N (docker-compose.replicas.yml: 3) prepares
# the data dirs of replicas 2..N too (the same path with -2, -3, ...).
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/local/go/bin:$PATH"
mkdir -p bin
CGO_ENABLED=0 go build -o bin/sandboxd ../cmd/sandboxd
CGO_ENABLED=0 go build -o bin/sandbox-agent ../cmd/sandbox-agent
CGO_ENABLED=0 go build -o bin/k8s-seccomp ../runner/kubernetes/cmd/k8s-seccomp
CGO_ENABLED=0 go build -o bin/k8s-workspace ../runner/kubernetes/cmd/k8s-workspace
for img in sandboxd/base:latest sandboxd/debian:bookworm; do
	docker image inspect "$img" >/dev/null 2>&1 || { echo "build.sh: $img missing: run scripts/build-images.sh" >&2; exit 1; }
done
docker build -t sandboxd/sandboxd:local -f Dockerfile .
# sandboxd mounts every workspace under its data dir inside its container;
# docker-compose.yml binds that dir rshared so that the mounts reach the
# host's dockerd, which needs the host path on a shared mount.
data=${SANDBOXD_COMPOSE_DATA:-/var/lib/sandboxd-compose}
replicas=${SANDBOXD_COMPOSE_REPLICAS:-1}
dirs=("$data")
for ((i = 2; i <= replicas; i++)); do dirs+=("$data-$i"); done
for d in "${dirs[@]}"; do
	mkdir -p "$d"
	if ! findmnt -n -o PROPAGATION --target "$d" | grep -q shared; then
		mount --bind "$d" "$d"
		mount --make-shared "$d"
	fi
done
docker build -t sandboxd/prometheus:local -f prometheus/Dockerfile prometheus
if [ "$replicas" -gt 1 ]; then
	docker build -t sandboxd/postgres:local -f postgres/Dockerfile postgres
fi
