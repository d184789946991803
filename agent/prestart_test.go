package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// prestartScript records its pid and start, then echoes its stdin, which
// it reads only once the exec hands it over, with exit status 3.
const prestartScript = `echo $$ >"$1"; cat; echo err >&2; exit 3`

func TestPrestart(t *testing.T) {
	t.Parallel()
	c, root := startServer(t, ServerOptions{})
	ctx := testCtx(t, 30*time.Second)
	pidFile := filepath.Join(root, "pid")
	req := func(stdin string) ExecRequest {
		return ExecRequest{Args: []string{"sh", "-c", prestartScript, "sh", pidFile}, Env: []string{"X=1"}, Dir: root, Stdin: []byte(stdin), Timeout: 5 * time.Second}
	}
	held := req("")
	if err := c.Prestart(ctx, &held); err != nil {
		t.Fatal(err)
	}
	pid := waitPidFile(t, pidFile)

	// Served by the held process: its pid, the same result as a fresh one.
	time.Sleep(300 * time.Millisecond) // the held process's age must not count
	var streamed strings.Builder
	got, err := c.Exec(ctx, req("hello"), func(_ string, b []byte) { streamed.Write(b) })
	if err != nil {
		t.Fatal(err)
	}
	if p := readPid(t, pidFile); p != pid {
		t.Errorf("the exec ran in pid %d, not the held %d", p, pid)
	}
	if got.Duration >= 300*time.Millisecond {
		t.Errorf("duration %v counts the time the process was held", got.Duration)
	}
	fresh, err := c.Exec(ctx, req("hello"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Stdout) != "hello" || string(got.Stderr) != "err\n" || got.ExitCode != 3 ||
		string(got.Stdout) != string(fresh.Stdout) || string(got.Stderr) != string(fresh.Stderr) || got.ExitCode != fresh.ExitCode {
		t.Errorf("held result %+v, fresh %+v", got, fresh)
	}
	if streamed.String() != "helloerr\n" && streamed.String() != "err\nhello" {
		t.Errorf("streamed %q", streamed.String())
	}

	// The held process serves one exec only: the next starts afresh.
	if _, err := c.Exec(ctx, req("again"), nil); err != nil {
		t.Fatal(err)
	}
	if p := readPid(t, pidFile); p == pid {
		t.Errorf("a second exec reused the held process")
	}

	// Any other exec kills the held process first.
	os.Remove(pidFile)
	if err := c.Prestart(ctx, &held); err != nil {
		t.Fatal(err)
	}
	pid = waitPidFile(t, pidFile)
	other := req("x")
	other.Env = []string{"X=2"}
	res, err := c.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf("kill -0 %d && echo alive || echo gone", pid)}}, nil)
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "gone" {
		t.Errorf("held process after another exec: %q %v", res.Stdout, err)
	}

	// A timeout counts from the exec, and a held process that timed out is
	// reported as a fresh one would be.
	os.Remove(pidFile)
	slow := ExecRequest{Args: []string{"sh", "-c", `echo $$ >"$1"; read x; sleep 30`, "sh", pidFile}, Dir: root}
	if err := c.Prestart(ctx, &slow); err != nil {
		t.Fatal(err)
	}
	waitPidFile(t, pidFile)
	time.Sleep(300 * time.Millisecond)
	slow.Stdin, slow.Timeout = []byte("go\n"), 500*time.Millisecond
	start := time.Now()
	res, err = c.Exec(ctx, slow, nil)
	if err != nil || !res.TimedOut || res.ExitCode != 137 {
		t.Errorf("timed out held exec: %+v %v", res, err)
	}
	if d := time.Since(start); d < 450*time.Millisecond {
		t.Errorf("timeout fired after %v: counted from the prestart", d)
	}

	// A nil request drops the held process; a bad one is refused.
	os.Remove(pidFile)
	if err := c.Prestart(ctx, &held); err != nil {
		t.Fatal(err)
	}
	pid = waitPidFile(t, pidFile)
	if err := c.Prestart(ctx, nil); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
	bad := req("stdin")
	if err := c.Prestart(ctx, &bad); err == nil {
		t.Error("prestart with stdin accepted")
	}
	missing := ExecRequest{Args: []string{"no-such-command-xyz"}}
	if err := c.Prestart(ctx, &missing); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("prestart of a missing command: %v", err)
	}
}

// TestPrestartKilledAtShutdown: the held process does not outlive the
// agent.
func TestPrestartKilledAtShutdown(t *testing.T) {
	t.Parallel()
	c, root := startServer(t, ServerOptions{})
	ctx := testCtx(t, 30*time.Second)
	pidFile := filepath.Join(root, "pid")
	req := ExecRequest{Args: []string{"sh", "-c", `echo $$ >"$1"; exec cat`, "sh", pidFile}}
	if err := c.Prestart(ctx, &req); err != nil {
		t.Fatal(err)
	}
	pid := waitPidFile(t, pidFile)
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid)
}

func waitPidFile(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			return readPid(t, path)
		}
	}
	t.Fatalf("%s not written", path)
	return 0
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// pyAge is a cell printing how long its interpreter has been running.
const pyAge = "import os\nst = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n" +
	"up = float(open('/proc/uptime').read().split()[0])\nup - int(st[19]) / os.sysconf('SC_CLK_TCK')"

func TestWarmREPL(t *testing.T) {
	needPython(t)
	t.Parallel()
	ctx := testCtx(t, 60*time.Second)
	age := func(c *Client) float64 {
		t.Helper()
		r, err := c.REPL(ctx, REPLRequest{Code: pyAge}, nil)
		if err != nil || !r.OK || r.Restarted {
			t.Fatalf("age cell: %+v %v", r, err)
		}
		v, err := strconv.ParseFloat(r.Value, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The first cell runs in the interpreter started ahead.
	c, _ := startServer(t, ServerOptions{})
	if err := c.WarmREPL(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if a := age(c); a < 0.5 {
		t.Errorf("first cell's interpreter is %.3fs old: not the warm one", a)
	}
	// Once used, an exec leaves it alone.
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"true"}}, nil); err != nil {
		t.Fatal(err)
	}
	if a := age(c); a < 0.5 {
		t.Errorf("an exec killed a used interpreter (%.3fs old)", a)
	}

	// An exec before any cell kills the warm interpreter; a cell drops a
	// held process.
	c, root := startServer(t, ServerOptions{})
	if err := c.WarmREPL(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	if _, err := c.Exec(ctx, ExecRequest{Args: []string{"true"}}, nil); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(root, "pid")
	held := ExecRequest{Args: []string{"sh", "-c", `echo $$ >"$1"; exec cat`, "sh", pidFile}}
	if err := c.Prestart(ctx, &held); err != nil {
		t.Fatal(err)
	}
	pid := waitPidFile(t, pidFile)
	if a := age(c); a >= 0.5 {
		t.Errorf("the warm interpreter survived an exec (%.3fs old)", a)
	}
	waitGone(t, pid)
}
