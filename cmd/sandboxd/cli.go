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
	"text/tabwriter"

	"github.com/sandboxd/sandboxd/config"
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
type serveFunc func(ctx context.Context, cfg *config.Config, log *slog.Logger) error

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
  sandboxd serve [--addr HOST:PORT] [--metrics-addr HOST:PORT] [--data-dir DIR] [--config FILE] [--log-level LEVEL]
  sandboxd run TOOL [--json '{...}'] [--code C] [--command C] [--expression E] [--path P]
                    [--arg KEY=VALUE]... [--wait DURATION] [--output text|json] [--session ID]
  sandboxd turn [--session ID] [--wait DURATION] [--output messages|json] [FILE]   (FILE or stdin: one model turn)
  sandboxd tools [--format openai|anthropic|mcp|json]
  sandboxd session create [--image I] [--effects exec,file_read,file_write] [--ttl 1h] [--idle 10m]
  sandboxd session list
  sandboxd session rm ID
  sandboxd files put --session ID LOCAL [REMOTE]     (a directory is sent as a tar)
  sandboxd files get --session ID REMOTE [LOCAL]     (a directory arrives as a tar, unpacked)
  sandboxd mcp [--url URL --api-key KEY] [--config FILE] [--data-dir DIR]   (MCP on stdio)
  sandboxd version
  sandboxd help [COMMAND]

Client commands (run, turn, tools, session, files) talk to the server at --url (default
$SANDBOXD_URL, else http://127.0.0.1:8080) with --api-key (default
$SANDBOXD_API_KEY).

Exit status: 0 ok; 1 the tool failed; 2 usage or configuration error;
3 the server is unreachable or answered an error.
`

// serveUsage is serve's help before the flags: every environment variable
// the loader reads, from the keys' declarations (package config).
func serveUsage() string {
	var b strings.Builder
	b.WriteString(`Usage: sandboxd serve [flags]

Precedence: flags > environment > config file > defaults. Without API keys
the server has one tenant ("default") and listens only on a loopback
address. Every key, its default and meaning: the README's configuration
table.

Environment:
`)
	paths := map[string][]string{}
	for _, k := range config.Keys() {
		if k.Env != "" {
			paths[k.Env] = append(paths[k.Env], k.Path)
		}
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SANDBOXD_CONFIG\tthe YAML config file (also --config)")
	for _, name := range config.EnvVars() {
		fmt.Fprintf(tw, "  %s\t%s\n", name, strings.Join(paths[name], ", "))
	}
	fmt.Fprintln(tw, "  HOME, XDG_DATA_HOME\tthe data directory's default")
	fmt.Fprintln(tw, "  PATH\twhere sandbox-agent is looked for (docker and containerd runners)")
	_ = tw.Flush()
	b.WriteString("\nFlags:\n")
	return b.String()
}

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
	case "mcp":
		return cmdMCP(ctx, rest, e)
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
	fl := serveFlags{Set: map[string]string{}}
	for _, k := range config.Flags() {
		fs.Func(k.Flag, fmt.Sprintf("%s (config %s, env %s; default %s)", k.Doc, k.Path, k.Env, k.DefaultText()), func(v string) error {
			fl.Set[k.Flag] = v
			return nil
		})
	}
	fs.StringVar(&fl.Config, "config", "", "YAML config file (env SANDBOXD_CONFIG)")
	fs.BoolVar(&debugPprof, "debug-pprof", false, "serve Go's profiler (net/http/pprof) at /debug/pprof/ on the metrics listener; for profiling only, not for production")
	fs.StringVar(&fl.Runtime, "runtime", "", "OCI runtime of the docker or containerd runner: runc, or runsc for gVisor (config runner.docker.runtime / runner.containerd.runtime; default: the daemon's default / runc)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), serveUsage())
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
