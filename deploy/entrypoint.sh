#!/bin/bash
# Puts the sandbox agent where the host's dockerd can bind-mount it: under
# the data directory, which docker-compose.yml mounts at the same path on
# the host and in this container. Then runs sandboxd.
set -euo pipefail
data=${SANDBOXD_DATA_DIR:?SANDBOXD_DATA_DIR must be set}
agent=${SANDBOXD_AGENT_PATH:-$data/bin/sandbox-agent}
mkdir -p "$(dirname "$agent")" "${TMPDIR:-/tmp}"
install -m 0755 /usr/local/lib/sandboxd/sandbox-agent "$agent.new"
mv -f "$agent.new" "$agent"
export SANDBOXD_AGENT_PATH=$agent
exec /usr/local/bin/sandboxd "$@"
