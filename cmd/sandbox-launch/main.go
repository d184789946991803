//go:build linux

// Command sandbox-launch is the local runner's sandbox launcher: the
// runner starts it in fresh namespaces for every sandbox, and it builds
// the isolation and execs the sandbox agent as the sandbox's pid 1
// (package runner/local/launch). It is found next to sandboxd or on PATH
// (runner.local.launcher_path); build it static with CGO_ENABLED=0.
package main

import (
	"os"

	"github.com/sandboxd/sandboxd/runner/local/launch"
)

func main() { os.Exit(launch.Main()) }
