package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
)

// Exit codes.
const (
	exitOK          = 0
	exitToolFailed  = 1 // run: the tool failed (ok=false) or the job did not succeed; serve: the daemon failed
	exitUsage       = 2 // bad flags, arguments or configuration
	exitUnreachable = 3 // the server is unreachable or answered an error
)

// version is set with -ldflags "-X main.version=v1.2.3".
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// serveFunc runs the daemon until ctx ends (serve.go wires the real one).
type serveFunc func(ctx context.Context, cfg *Config, log *slog.Logger) error

// env is the process environment the CLI reads; tests replace it.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	euid           int
	serve          serveFunc
}

func osEnv(serve serveFunc) env {
	return env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, euid: os.Geteuid(), serve: serve}
}

const usage = `sandboxd runs the tool calls of LLM agents in sandboxes.

Usage:
  sandboxd serve [--addr HOST:PORT] [--data-dir DIR] [--config FILE] [--log-level LEVEL]
  sandboxd run TOOL [--json '{...}'] [--code C] [--command C] [--expression E] [--path P]
                    [--arg KEY=VALUE]... [--wait DURATION] [--output text|json] [--session ID]
  sandboxd turn [--session ID] [--wait DURATION] [--output messages|json] [FILE]   (FILE or stdin: one model turn)
  sandboxd tools [--format openai|anthropic|mcp|json]
  sandboxd session create [--image I] [--effects exec,file_read,file_write] [--ttl 1h] [--idle 10m]
  sandboxd session list
  sandboxd session rm ID
  sandboxd files put --session ID LOCAL [REMOTE]     (a directory is sent as a tar)
  sandboxd files get --session ID REMOTE [LOCAL]     (a directory arrives as a tar, unpacked)
  sandboxd version
  sandboxd help [COMMAND]

Client commands (run, turn, tools, session, files) talk to the server at --url (default
$SANDBOXD_URL, else http://127.0.0.1:8080) with --api-key (default
$SANDBOXD_API_KEY).

Exit status: 0 ok; 1 the tool failed; 2 usage or configuration error;
3 the server is unreachable or answered an error.
`

const serveUsage = `Usage: sandboxd serve [flags]

Precedence: flags > environment > config file > defaults.
Other environment variables: SANDBOXD_RUNNER, SANDBOXD_ROOTFS,
SANDBOXD_ALLOW_WEAK, SANDBOXD_API_KEYS (KEY:TENANT,...), SANDBOXD_WORKERS,
SANDBOXD_QUEUE_SIZE, SANDBOXD_MAX_WAIT, SANDBOXD_MAX_BODY_BYTES.
Without API keys the server has one tenant ("default") and listens only on
a loopback address.

Flags:
`

// cli runs one command line and returns the exit status.
func cli(ctx context.Context, args []string, e env) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return cmdServe(ctx, rest, e)
	case "run":
		return cmdRun(ctx, rest, e)
	case "turn":
		return cmdTurn(ctx, rest, e, e.stdin)
	case "tools":
		return cmdTools(ctx, rest, e)
	case "session", "sessions":
		return cmdSession(ctx, rest, e)
	case "files":
		return cmdFiles(ctx, rest, e)
	case "version", "--version", "-version":
		fmt.Fprintln(e.stdout, "sandboxd", versionString())
		return exitOK
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "help" {
			return cli(ctx, []string{rest[0], "-h"}, e)
		}
		fmt.Fprint(e.stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(e.stderr, "sandboxd: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// parseFlags parses a FlagSet, mapping -h to exit 0 and errors to 2.
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

func cmdServe(ctx context.Context, args []string, e env) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var fl serveFlags
	fs.StringVar(&fl.Addr, "addr", "", "listen address HOST:PORT (env SANDBOXD_ADDR; default "+defaultAddr+")")
	fs.StringVar(&fl.DataDir, "data-dir", "", "data directory (env SANDBOXD_DATA_DIR; default /var/lib/sandboxd as root, else $XDG_DATA_HOME/sandboxd or ~/.local/share/sandboxd)")
	fs.StringVar(&fl.Config, "config", "", "YAML config file (env SANDBOXD_CONFIG)")
	fs.StringVar(&fl.LogLevel, "log-level", "", "debug, info, warn or error (env SANDBOXD_LOG_LEVEL; default info)")
	fs.StringVar(&fl.Runner, "runner", "", "local, docker or containerd (env SANDBOXD_RUNNER; default local)")
	fs.StringVar(&fl.Runtime, "runtime", "", "OCI runtime of the docker or containerd runner: runc, or runsc for gVisor (config runner.docker.runtime / runner.containerd.runtime; default: the daemon's default / runc)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(e.stderr, "sandboxd serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	cfg, err := loadConfig(fl, e.getenv, e.euid)
	if err != nil {
		fmt.Fprintf(e.stderr, "sandboxd serve: %v\n", err)
		return exitUsage
	}
	log := newLogger(e.stderr, cfg.LogLevel)
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := e.serve(ctx, cfg, log); err != nil {
		log.Error("sandboxd stopped", "err", err)
		return exitToolFailed
	}
	return exitOK
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(strings.ToUpper(level)))
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}
