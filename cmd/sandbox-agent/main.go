// Command sandbox-agent is the in-sandbox agent of sandboxd: a static
// binary that a runner mounts read-only into every sandbox and starts as
// its first process. It serves the agent protocol (package agent) on a
// unix socket (--socket) or on stdin/stdout (--stdio), runs processes and
// a persistent Python REPL, and does file operations confined to --root.
//
// As pid 1 it reaps orphaned zombies. SIGTERM or SIGINT (or a shutdown
// request) kill every process it started and make it exit 0.
//
// The socket is created with mode 0666: the agent runs as an unprivileged
// uid (65534) inside the container while sandboxd connects as root from
// the host through a bind-mounted directory, and other processes of the
// sandbox run as the same uid anyway. Access control is the directory:
// the runner creates the host directory 0700 (root) and only bind-mounts
// it into this one sandbox.
//
// Once listening, it prints "ready" on stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/sandboxd/sandboxd/agent"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", "", "unix socket path to listen on")
	stdio := flag.Bool("stdio", false, "serve one connection on stdin/stdout")
	root := flag.String("root", "/workspace", "directory file operations are confined to; default working directory")
	python := flag.String("python", "/usr/bin/python3", "python interpreter for the REPL")
	reap := flag.Bool("reap", os.Getpid() == 1, "reap orphaned children (default: when pid 1)")
	verbose := flag.Bool("v", false, "log to stderr")
	flag.Parse()
	if (*socket == "") == !*stdio {
		return errors.New("exactly one of --socket or --stdio is required")
	}

	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *reap {
		go agent.Reap(ctx)
	}
	opts := agent.ServerOptions{
		Root:       *root,
		PythonPath: *python,
		Env:        baseEnv(),
		Logger:     logger,
	}
	if fi, err := os.Stat(*root); err != nil || !fi.IsDir() {
		fmt.Fprintf(os.Stderr, "sandbox-agent: root %s is not a directory; file operations disabled\n", *root)
		opts.Root = ""
	}

	if *stdio {
		fmt.Fprintln(os.Stderr, "ready")
		return agent.ServeConn(ctx, agent.StreamConn(os.Stdin, os.Stdout), opts)
	}

	if err := os.MkdirAll(filepath.Dir(*socket), 0o755); err != nil {
		return err
	}
	os.Remove(*socket) // stale socket of a previous run
	l, err := net.Listen("unix", *socket)
	if err != nil {
		return err
	}
	defer os.Remove(*socket)
	if err := os.Chmod(*socket, 0o666); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "ready")
	return agent.Serve(ctx, l, opts)
}

// baseEnv is the environment processes start with: the agent's own,
// which the runner sets to the sandbox's cleared environment.
func baseEnv() []string {
	env := os.Environ()
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "PATH=" {
			return env
		}
	}
	return append(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
}
