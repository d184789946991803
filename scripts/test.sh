#!/usr/bin/env bash
# The whole test suite: installs what the tests need, then runs formatting
# and vet checks, unit tests with the race detector, short fuzz runs and the
# integration tests (which start real sandboxd processes).
#
#   FUZZTIME=10s   time per fuzz target (0 skips fuzzing)
#   SKIP_SETUP=1   skip the package installation step
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

[ "${SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt needed:"; echo "$unformatted"; exit 1
fi

echo "== go vet"
go vet ./...
go vet -tags integration ./integration/

echo "== unit tests (race)"
go test -race -count=1 ./...

fuzztime=${FUZZTIME:-10s}
if [ "$fuzztime" != 0 ]; then
	echo "== fuzz ($fuzztime each)"
	for pkg in $(go list ./...); do
		dir=$(go list -f '{{.Dir}}' "$pkg")
		for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/func //'); do
			echo "-- $pkg $f"
			go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" "$pkg" >/tmp/fuzz.$$ 2>&1 || { cat /tmp/fuzz.$$; exit 1; }
		done
	done
	rm -f /tmp/fuzz.$$
fi

echo "== integration tests"
go test -tags integration -count=1 -v ./integration/ 2>&1 | tee /tmp/sandboxd-integration.log | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)' || true
grep -qE '^(FAIL|panic)' /tmp/sandboxd-integration.log && { tail -60 /tmp/sandboxd-integration.log; exit 1; }
grep -q '^ok' /tmp/sandboxd-integration.log || { tail -60 /tmp/sandboxd-integration.log; exit 1; }
echo "== all tests passed"
