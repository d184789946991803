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

// agentCmd runs the agent with args. Not as root it runs the code as
// itself (it cannot switch users); as root, as the default code user.
func agentCmd(args ...string) *exec.Cmd {
	if os.Getuid() != 0 {
		args = append(args, "--uid", strconv.Itoa(os.Getuid()), "--gid", strconv.Itoa(os.Getgid()))
	}
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

// codeDir is a directory the code's user can use: the agent's root in
// these tests.
func codeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSocketModeAndSIGTERM(t *testing.T) {
	t.Parallel()
	dir := codeDir(t)
	sock := filepath.Join(dir, "run", "agent.sock") // parent is created by the agent
	cmd := agentCmd("--socket", sock, "--root", dir)
	waitReady(t, cmd)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", fi, err)
	}
	if fi, err := os.Stat(filepath.Dir(sock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("socket directory: %v %v", fi, err)
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
	cmd := agentCmd("--stdio", "--root", codeDir(t))
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

// TestCodeUser: as root, the agent runs the code (exec and the REPL) as
// the code user with no groups and no capabilities, gives it the files it
// writes, and the code can neither signal nor read the agent, nor reach
// its socket.
func TestCodeUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (switching users)")
	}
	t.Parallel()
	dir := codeDir(t)
	sock := filepath.Join(dir, "run", "agent.sock")
	cmd := agentCmd("--socket", sock, "--root", dir)
	waitReady(t, cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	check := func(who, status string) {
		t.Helper()
		f := map[string]string{}
		for _, line := range strings.Split(status, "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				f[k] = strings.Join(strings.Fields(v), " ")
			}
		}
		if f["Uid"] != "65534 65534 65534 65534" || f["Gid"] != "65534 65534 65534 65534" || f["Groups"] != "" {
			t.Errorf("%s: Uid %q Gid %q Groups %q", who, f["Uid"], f["Gid"], f["Groups"])
		}
		for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
			if f[k] != "0000000000000000" {
				t.Errorf("%s: %s = %s", who, k, f[k])
			}
		}
	}
	res, err := c.Exec(ctx, agent.ExecRequest{Args: []string{"cat", "/proc/self/status"}}, nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	check("exec", string(res.Stdout))
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		r, err := c.REPL(ctx, agent.REPLRequest{Code: `print(open("/proc/self/status").read())`}, nil)
		if err != nil || !r.OK {
			t.Fatalf("repl: %+v %v", r, err)
		}
		check("repl", r.Stdout)
	}

	if err := c.WriteFile(ctx, "a/b/c.txt", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/c.txt"} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}

	pid := strconv.Itoa(cmd.Process.Pid)
	res, err = c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", `
kill -0 ` + pid + ` && echo SIGNALLED
cat /proc/` + pid + `/environ >/dev/null && echo READ-ENVIRON
ls /proc/` + pid + `/fd >/dev/null && echo LISTED-FDS
ls ` + filepath.Dir(sock) + ` && echo LISTED-SOCKET-DIR
rm -f ` + sock + ` && echo REMOVED-SOCKET
echo done`}}, nil)
	if err != nil || string(res.Stdout) != "done\n" {
		t.Errorf("attacks from the code: %v\nstdout: %s\nstderr: %s", err, res.Stdout, res.Stderr)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("socket: %v", err)
	}
	// The code's process group still dies at the timeout (the agent may
	// signal another uid).
	res, err = c.Exec(ctx, agent.ExecRequest{Args: []string{"sh", "-c", "sleep 100 & sleep 100"}, Timeout: 300 * time.Millisecond}, nil)
	if err != nil || !res.TimedOut {
		t.Fatalf("timeout: %+v %v", res, err)
	}
}
