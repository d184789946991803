// Command sandboxd is the sandboxd daemon (serve) and its command-line
// client (run, tools). See `sandboxd help`.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(cli(context.Background(), os.Args[1:], osEnv(serve)))
}
