#!/usr/bin/env bash
# Runs staticcheck (honnef.co/go/tools, from the Go module proxy) over the
# module, the integration tests included, with its default checks; any
# finding fails. scripts/test.sh runs it beside go vet.
#
# The binary is cached in $STATICCHECK_CACHE/bin (default
# /var/cache/sandboxd/staticcheck) and keyed by its module version and the
# Go toolchain that built it (go version -m): bumping either rebuilds
# (about a minute), nothing else does. A finding that is right to keep
# gets a targeted //lint:ignore CHECK reason on its line, never a blanket
# exclusion.
#
# Env: STATICCHECK_VERSION, STATICCHECK_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

version=${STATICCHECK_VERSION:-v0.8.2}
cache=${STATICCHECK_CACHE:-/var/cache/sandboxd/staticcheck}
bin=$cache/bin/staticcheck

built_with() { # → "<module version> <go version>" of the cached binary, or nothing
	[ -x "$bin" ] || return 0
	go version -m "$bin" 2>/dev/null | awk '
		NR == 1 { gover = $2 }
		$1 == "mod" && $2 == "honnef.co/go/tools" { mod = $3 }
		END { if (mod != "") print mod, gover }'
}
if [ "$(built_with)" != "$version $(go env GOVERSION)" ]; then
	echo "staticcheck: building honnef.co/go/tools/cmd/staticcheck@$version" >&2
	mkdir -p "$cache/bin"
	# Outside any module, so the project's go.mod does not interfere.
	(cd / && GOBIN="$cache/bin" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install "honnef.co/go/tools/cmd/staticcheck@$version")
fi

"$bin" ./...
"$bin" -tags integration ./integration/
