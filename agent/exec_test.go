package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestExec(t *testing.T) {
	t.Parallel()
	c, root := startServer(t, ServerOptions{Env: []string{"PATH=/usr/bin:/bin", "BASE=base"}})
	if err := os.Mkdir(root+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		req        ExecRequest
		wantCode   int
		wantSignal string
		wantOut    string
		wantErr    string
	}{
		{"exit 0", ExecRequest{Args: []string{"true"}}, 0, "", "", ""},
		{"exit 3", ExecRequest{Args: []string{"sh", "-c", "exit 3"}}, 3, "", "", ""},
		{"signal", ExecRequest{Args: []string{"sh", "-c", "kill -TERM $$"}}, 143, "SIGTERM", "", ""},
		{"not found", ExecRequest{Args: []string{"no-such-command-xyz"}}, 127, "", "", "not found"},
		{"not executable", ExecRequest{Args: []string{"/etc/passwd"}}, 126, "", "", "permission denied"},
		{"env", ExecRequest{Args: []string{"sh", "-c", "echo $BASE $EXTRA"}, Env: []string{"EXTRA=x"}}, 0, "", "base x\n", ""},
		{"env override", ExecRequest{Args: []string{"sh", "-c", "echo $BASE"}, Env: []string{"BASE=mine"}}, 0, "", "mine\n", ""},
		{"env not inherited", ExecRequest{Args: []string{"sh", "-c", "echo ${HOME:-none}"}}, 0, "", "none\n", ""},
		{"default cwd is root", ExecRequest{Args: []string{"pwd"}}, 0, "", root + "\n", ""},
		{"relative cwd", ExecRequest{Args: []string{"pwd"}, Dir: "sub"}, 0, "", root + "/sub\n", ""},
		{"absolute cwd", ExecRequest{Args: []string{"pwd"}, Dir: "/tmp"}, 0, "", "/tmp\n", ""},
		{"stdin", ExecRequest{Args: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("hello")}, 0, "", "HELLO", ""},
		{"big stdin", ExecRequest{Args: []string{"wc", "-c"}, Stdin: bytes.Repeat([]byte("x"), 1<<20)}, 0, "", "1048576\n", ""},
		{"unread stdin", ExecRequest{Args: []string{"true"}, Stdin: bytes.Repeat([]byte("x"), 1<<20)}, 0, "", "", ""},
		{"no stdin is empty", ExecRequest{Args: []string{"cat"}}, 0, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := c.Exec(testCtx(t, 20*time.Second), tt.req, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != tt.wantCode || res.Signal != tt.wantSignal {
				t.Errorf("exit = %d %q, want %d %q (stderr %q)", res.ExitCode, res.Signal, tt.wantCode, tt.wantSignal, res.Stderr)
			}
			if string(res.Stdout) != tt.wantOut {
				t.Errorf("stdout = %q, want %q", res.Stdout, tt.wantOut)
			}
			if !strings.Contains(strings.ToLower(string(res.Stderr)), tt.wantErr) {
				t.Errorf("stderr = %q, want %q", res.Stderr, tt.wantErr)
			}
			if res.TimedOut || res.Duration <= 0 {
				t.Errorf("TimedOut=%v Duration=%v", res.TimedOut, res.Duration)
			}
		})
	}
}

// procGone reports whether pid no longer runs (gone or a zombie).
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !procGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	start := time.Now()
	res, err := c.Exec(testCtx(t, 20*time.Second), ExecRequest{
		Args:    []string{"sh", "-c", "sleep 100 & echo $!; sleep 100"},
		Timeout: 300 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode != 137 {
		t.Errorf("res = %+v, want timed out by SIGKILL", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	waitGone(t, pid)
}

func TestExecBackgroundLeftoverKilled(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	start := time.Now()
	res, err := c.Exec(testCtx(t, 20*time.Second), ExecRequest{Args: []string{"sh", "-c", "sleep 100 & echo $!"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("exec waited %v for a background child", d)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	waitGone(t, pid)
}

func TestExecCancel(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	ctx, cancel := context.WithCancel(testCtx(t, 20*time.Second))
	pidc := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, ExecRequest{Args: []string{"sh", "-c", "echo $$; exec sleep 100"}}, func(_ string, b []byte) {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				select {
				case pidc <- pid:
				default:
				}
			}
		})
		done <- err
	}()
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(10 * time.Second):
		t.Fatal("no output")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exec did not return after cancel")
	}
	waitGone(t, pid)
	// The connection is still usable.
	if err := c.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

// TestExecStop: closing ExecRequest.Stop kills the process group and the
// exec still answers its result, with the output so far and Killed set.
func TestExecStop(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	stop := make(chan struct{})
	var once sync.Once
	start := time.Now()
	res, err := c.Exec(testCtx(t, 20*time.Second), ExecRequest{
		Args: []string{"sh", "-c", "sleep 100 & echo $!; sleep 100"},
		Stop: stop,
	}, func(_ string, b []byte) {
		if strings.TrimSpace(string(b)) != "" {
			once.Do(func() { close(stop) })
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Killed || res.TimedOut || res.Signal != "SIGKILL" || res.ExitCode != 137 {
		t.Errorf("res = %+v, want killed by SIGKILL, not timed out", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(res.Stdout)))
	if err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	waitGone(t, pid)
	// A process that ends on its own is not reported killed, and a Stop
	// closed after the exec costs nothing.
	stop2 := make(chan struct{})
	res, err = c.Exec(testCtx(t, 20*time.Second), ExecRequest{Args: []string{"true"}, Stop: stop2}, nil)
	close(stop2)
	if err != nil || res.Killed || res.ExitCode != 0 {
		t.Fatalf("res = %+v, %v", res, err)
	}
	if err := c.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestExecOutputCap(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	var streamed [2]int
	var mu sync.Mutex
	res, err := c.Exec(testCtx(t, 20*time.Second), ExecRequest{
		Args:        []string{"sh", "-c", "echo START; yes abcdefgh | head -c 199998; echo END; yes e | head -c 5000 >&2"},
		OutputLimit: 1000,
	}, func(s string, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		if s == "stdout" {
			streamed[0] += len(b)
		} else {
			streamed[1] += len(b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if !res.StdoutTruncated || !strings.HasPrefix(out, "START\nabcdefgh\n") || !strings.HasSuffix(out, "abcdefgh\nEND\n") || !strings.Contains(out, "bytes truncated") {
		t.Errorf("stdout (truncated=%v): %q", res.StdoutTruncated, out)
	}
	if len(out) > 1100 {
		t.Errorf("stdout is %d bytes, want about 1000", len(out))
	}
	if !res.StderrTruncated || len(res.Stderr) > 1100 {
		t.Errorf("stderr truncated=%v len=%d", res.StderrTruncated, len(res.Stderr))
	}
	if streamed[0] != 1000 || streamed[1] != 1000 {
		t.Errorf("streamed %v bytes, want the limit (1000) per stream", streamed)
	}
}

func TestExecStreamOrder(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	var got bytes.Buffer
	var firstChunk time.Time
	start := time.Now()
	res, err := c.Exec(testCtx(t, 20*time.Second), ExecRequest{
		Args: []string{"sh", "-c", "for i in $(seq 1 500); do echo line $i; done; sleep 0.5; echo last"},
	}, func(s string, b []byte) {
		if s != "stdout" {
			t.Errorf("stream %q", s)
		}
		if firstChunk.IsZero() {
			firstChunk = time.Now()
		}
		got.Write(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(res.Stdout) {
		t.Errorf("streamed output differs from result")
	}
	var want strings.Builder
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	want.WriteString("last\n")
	if got.String() != want.String() {
		t.Errorf("streamed out of order")
	}
	if firstChunk.Sub(start) > res.Duration-300*time.Millisecond {
		t.Errorf("first chunk after %v of %v: not streamed", firstChunk.Sub(start), res.Duration)
	}
}

func TestExecConcurrent(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			res, err := c.Exec(testCtx(t, 20*time.Second), ExecRequest{Args: []string{"echo", strconv.Itoa(i)}}, nil)
			if err != nil || string(res.Stdout) != fmt.Sprintf("%d\n", i) {
				t.Errorf("exec %d: %q %v", i, res.Stdout, err)
			}
		})
	}
	wg.Wait()
}
