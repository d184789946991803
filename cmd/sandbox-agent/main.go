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
// With --egress-listen ADDR --egress-socket PATH (NetworkEgress sandboxes)
// it also listens on TCP ADDR, the sandbox's HTTP proxy address, and
// forwards every connection byte for byte to the unix socket PATH, where
// sandboxd's egress proxy decides what passes (agent.ForwardEgress).
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
	"runtime"
	"sync"
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
	egressListen := flag.String("egress-listen", "", "TCP address of the sandbox's HTTP proxy (127.0.0.1:3128); needs --egress-socket")
	egressSocket := flag.String("egress-socket", "", "unix socket of sandboxd's egress proxy that --egress-listen forwards to")
	flag.Parse()
	// Under a full pids limit (a fork bomb in the sandbox) the Go runtime
	// cannot start a thread it needs and dies; threads started now stay
	// idle in the runtime's pool for later.
	prewarmThreads(16)
	if (*socket == "") == !*stdio {
		return errors.New("exactly one of --socket or --stdio is required")
	}
	if (*egressListen == "") != (*egressSocket == "") {
		return errors.New("--egress-listen and --egress-socket go together")
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
	if *egressListen != "" {
		// Before "ready": no sandboxed code runs until the proxy address
		// is ours (nothing else can take the port).
		el, err := net.Listen("tcp", *egressListen)
		if err != nil {
			return fmt.Errorf("egress proxy listener: %w", err)
		}
		// Every process (exec and the REPL) finds the proxy the usual way.
		proxy := "http://" + el.Addr().String()
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			opts.Env = append(opts.Env, k+"="+proxy)
		}
		go func() {
			if err := agent.ForwardEgress(ctx, el, *egressSocket, logger); err != nil {
				fmt.Fprintln(os.Stderr, "sandbox-agent: egress forwarder:", err)
			}
		}()
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

// prewarmThreads makes the runtime start n OS threads and keep them idle.
func prewarmThreads(n int) {
	var ready, release sync.WaitGroup
	release.Add(1)
	for range n {
		ready.Add(1)
		go func() {
			runtime.LockOSThread()
			ready.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	release.Done()
}
