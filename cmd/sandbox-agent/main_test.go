package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
)

// The test binary doubles as the agent: TestMain runs main when asked.
func TestMain(m *testing.M) {
	if os.Getenv("SANDBOX_AGENT_TEST_MAIN") == "1" {
		os.Args = append([]string{"sandbox-agent"}, strings.Fields(os.Getenv("SANDBOX_AGENT_TEST_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func agentCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"SANDBOX_AGENT_TEST_MAIN=1", "SANDBOX_AGENT_TEST_ARGS=" + strings.Join(args, " "), "PATH=/usr/bin:/bin"}
	return cmd
}

// waitReady waits for "ready" on the agent's stderr.
func waitReady(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			} else {
				t.Logf("agent: %s", sc.Text())
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("agent exited before ready")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent not ready")
	}
}

func TestSocketModeAndSIGTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "agent.sock") // parent is created by the agent
	cmd := agentCmd("--socket", sock, "--root", dir)
	waitReady(t, cmd)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteFile(ctx, "f.txt", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "f.txt")); err != nil || string(b) != "x" {
		t.Fatalf("file: %q %v", b, err)
	}

	pidc := make(chan int, 1)
	go c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", "echo $$; exec sleep 100"}}, func(_ string, b []byte) {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pidc <- pid
		}
	})
	var pid int
	select {
	case pid = <-pidc:
	case <-ctx.Done():
		t.Fatal("no pid")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit on SIGTERM")
	}
	if err := syscall.Kill(pid, 0); err == nil {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if !strings.Contains(string(b), ") Z ") {
			t.Errorf("child %d survived the agent: %s", pid, b)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestStdioMode(t *testing.T) {
	t.Parallel()
	cmd := agentCmd("--stdio", "--root", t.TempDir())
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, cmd)
	c := agent.NewClient(agent.StreamConn(out, in))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"echo", "over stdio"}}, nil)
	if err != nil || string(res.Stdout) != "over stdio\n" {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not exit on shutdown")
	}
}

func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"--stdio", "--socket", "/tmp/x.sock"}} {
		out, err := agentCmd(args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "exactly one of") {
			t.Errorf("%v: %v %s", args, err, out)
		}
	}
}
