// Command sandbox-agent is the in-sandbox agent of sandboxd: a static
// binary that a runner mounts read-only into every sandbox and starts as
// its first process. It serves the agent protocol (package agent) on a
// unix socket (--socket) or on stdin/stdout (--stdio), runs processes and
// a persistent Python REPL, and does file operations confined to --root.
//
// As pid 1 it reaps orphaned zombies. SIGTERM or SIGINT (or a shutdown
// request) kill every process it started and make it exit 0.
//
// The agent model (package policy of sandboxd): the runner starts the
// agent as uid 0 with only CAP_SETUID, CAP_SETGID, CAP_KILL, CAP_CHOWN,
// CAP_DAC_OVERRIDE and CAP_FOWNER, no_new_privs and the sandbox's seccomp
// profile. The agent makes itself non-dumpable and empties its ambient and
// inheritable capabilities (agent.Harden), then starts every process for
// the code as --uid/--gid (65534) with no supplementary groups and no
// capabilities, and gives the files it writes to that user. It kills the
// code's processes on timeout, cancel and exit (CAP_KILL); the code can
// neither signal, trace nor read the agent (another uid, non-dumpable).
// An agent already running as --uid/--gid (tests) starts processes as
// itself.
//
// The socket is created with mode 0600 in a directory that must be mode
// 0700 and not the code's: sandboxd connects as root from the host through
// the bind-mounted directory, and the code cannot list, traverse or write
// it.
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
	"time"

	"github.com/sandboxd/sandboxd/agent"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == agent.SeccompExecArg {
		// The launcher of one code process (--code-seccomp).
		err := agent.SeccompExec(os.Args[2:])
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		os.Exit(126)
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		os.Exit(1)
	}
}

func run() error {
	socket := flag.String("socket", "", "unix socket path to listen on")
	stdio := flag.Bool("stdio", false, "serve one connection on stdin/stdout")
	listenTCP := flag.String("listen-tcp", "", "TCP address to listen on instead of --socket (the Kubernetes runner); needs --token-file")
	egressReverse := flag.String("egress-reverse", "", "TCP address where sandboxd opens the connections --egress-listen forwards over (instead of --egress-socket; authenticated by --token-file)")
	tokenFile := flag.String("token-file", "", "file of the agent.TokenBytes secret every --listen-tcp connection must send first")
	root := flag.String("root", "/workspace", "directory file operations are confined to; default working directory")
	python := flag.String("python", "/usr/bin/python3", "python interpreter for the REPL")
	reap := flag.Bool("reap", os.Getpid() == 1, "reap orphaned children (default: when pid 1)")
	verbose := flag.Bool("v", false, "log to stderr")
	egressListen := flag.String("egress-listen", "", "TCP address of the sandbox's HTTP proxy (127.0.0.1:3128); needs --egress-socket")
	egressSocket := flag.String("egress-socket", "", "unix socket of sandboxd's egress proxy that --egress-listen forwards to")
	uid := flag.Int("uid", codeID, "uid of every process the agent starts (the code) and of the files it creates")
	gid := flag.Int("gid", codeID, "gid of every process the agent starts (the code) and of the files it creates")
	cgroupUsage := flag.Bool("cgroup-usage", false, "give each exec's result the container's cgroup as read from inside: OOM-killed (SIGKILL while the memory cgroup counted an OOM kill), CPU time, peak memory (the Kubernetes runner)")
	killStrays := flag.Bool("kill-strays", false, "when the last running exec ends, kill the processes that left the agent's session (setsid daemons); needs the agent alone in its pid namespace (the Kubernetes runner)")
	codeSeccomp := flag.String("code-seccomp", "", "file of a raw seccomp filter (struct sock_filter[]) every process of the code gets on top of the agent's own (the Kubernetes runner: its agent needs inet sockets the code may not have); needs --uid other than the agent's")
	flag.Parse()
	// First, before anything runs for the code: non-dumpable, no ambient
	// or inheritable capabilities on any thread.
	if err := agent.Harden(); err != nil {
		return err
	}
	// Under a full pids limit (a fork bomb in the sandbox) the Go runtime
	// cannot start a thread it needs and dies; threads started now stay
	// idle in the runtime's pool for later.
	prewarmThreads(16)
	modes := 0
	for _, on := range []bool{*socket != "", *stdio, *listenTCP != ""} {
		if on {
			modes++
		}
	}
	if modes != 1 {
		return errors.New("exactly one of --socket, --stdio or --listen-tcp is required")
	}
	if (*listenTCP == "") != (*tokenFile == "") {
		return errors.New("--listen-tcp and --token-file go together")
	}
	if (*egressListen == "") != (*egressSocket == "" && *egressReverse == "") || (*egressSocket != "" && *egressReverse != "") {
		return errors.New("--egress-listen and one of --egress-socket or --egress-reverse go together")
	}
	if *egressReverse != "" && *tokenFile == "" {
		return errors.New("--egress-reverse needs --token-file")
	}
	user, err := codeUser(*uid, *gid)
	if err != nil {
		return err
	}
	if *codeSeccomp != "" {
		if user == nil {
			return errors.New("--code-seccomp needs --uid and --gid other than the agent's")
		}
		filter, err := os.ReadFile(*codeSeccomp)
		if err != nil {
			return fmt.Errorf("--code-seccomp: %w", err)
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--code-seccomp: %w", err)
		}
		user = user.WithSeccomp(filter, self)
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
		Root:        *root,
		PythonPath:  *python,
		Env:         baseEnv(),
		Logger:      logger,
		CodeUser:    user,
		CgroupUsage: *cgroupUsage,
		KillStrays:  *killStrays,
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
		dial := func(ctx context.Context) (net.Conn, error) {
			d := net.Dialer{Timeout: 10 * time.Second}
			return d.DialContext(ctx, "unix", *egressSocket)
		}
		if *egressReverse != "" {
			token, err := os.ReadFile(*tokenFile)
			if err != nil {
				return fmt.Errorf("--egress-reverse: token: %w", err)
			}
			raw, err := net.Listen("tcp", *egressReverse)
			if err != nil {
				return fmt.Errorf("--egress-reverse: %w", err)
			}
			rl, err := agent.TokenListener(raw, token)
			if err != nil {
				return err
			}
			dial = agent.NewReverseEgress(ctx, rl).Take
		}
		go func() {
			if err := agent.ForwardEgressTo(ctx, el, dial, logger); err != nil {
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

	if *listenTCP != "" {
		token, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("--listen-tcp: token: %w", err)
		}
		raw, err := net.Listen("tcp", *listenTCP)
		if err != nil {
			return err
		}
		l, err := agent.TokenListener(raw, token)
		if err != nil {
			raw.Close()
			return err
		}
		fmt.Fprintln(os.Stderr, "ready")
		return agent.Serve(ctx, l, opts)
	}

	if err := socketDir(filepath.Dir(*socket), user); err != nil {
		return err
	}
	os.Remove(*socket) // stale socket of a previous run
	l, err := net.Listen("unix", *socket)
	if err != nil {
		return err
	}
	defer os.Remove(*socket)
	if err := os.Chmod(*socket, 0o600); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "ready")
	return agent.Serve(ctx, l, opts)
}

// codeID is the default uid and gid of the code (policy.CodeUID and
// policy.CodeGID in sandboxd).
const codeID = 65534

// codeUser is the user the code runs as: nil when the agent already is
// that user (nothing to switch), an error for root or a bad id.
func codeUser(uid, gid int) (*agent.User, error) {
	if uid <= 0 || gid <= 0 || uid > 1<<32-2 || gid > 1<<32-2 {
		return nil, fmt.Errorf("--uid %d --gid %d: the code runs as a non-root uid and gid", uid, gid)
	}
	if uid == os.Getuid() && gid == os.Getgid() {
		return nil, nil
	}
	return &agent.User{UID: uint32(uid), GID: uint32(gid)}, nil
}

// socketDir creates the socket's directory (mode 0700) if missing and
// checks it is closed to the code: mode 0700 or stricter, and, when the
// code is another user, not the code's.
func socketDir(dir string, code *agent.User) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("socket directory %s has mode %o: the code could reach the socket; want 0700", dir, fi.Mode().Perm())
	}
	if code != nil && st.Uid == code.UID {
		return fmt.Errorf("socket directory %s is owned by the code's uid %d; want the agent's", dir, st.Uid)
	}
	return nil
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
