// Command sandboxd is the sandboxd daemon (serve) and its command-line
// client (run, tools). See `sandboxd help`.
package main

import (
	"context"
	"os"

	"github.com/sandboxd/sandboxd/runner/local"
)

func main() {
	// Must come first: in a sandbox's re-exec'd helper process this runs
	// the helper and never returns.
	local.MaybeHelper()
	os.Exit(cli(context.Background(), os.Args[1:], osEnv(serve)))
}
