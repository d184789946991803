package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func repl(t *testing.T, c *Client, code string, timeout time.Duration) REPLResult {
	t.Helper()
	res, err := c.REPL(testCtx(t, 30*time.Second), REPLRequest{Code: code, Timeout: timeout}, nil)
	if err != nil {
		t.Fatalf("REPL(%q): %v", code, err)
	}
	return res
}

func TestREPLCells(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	tests := []struct {
		name, code           string
		ok                   bool
		value, stdout, error string // error: substring of the traceback
		exit                 int    // ExitCode: 1 after an exception, sys.exit's status
	}{
		{"assign", "x = 41", true, "", "", "", 0},
		{"globals persist", "x + 1", true, "42", "", "", 0},
		{"function persists", "def f(n):\n    return n * 2\n", true, "", "", "", 0},
		{"call", "f(x)", true, "82", "", "", 0},
		{"print and value", "print('hi')\n'v'", true, "'v'", "hi\n", "", 0},
		{"None value", "None", true, "", "", "", 0},
		{"trailing statement", "y = 1\nz = 2", true, "", "", "", 0},
		{"underscore", "_", true, "'v'", "", "", 0},
		{"exception", "def g():\n    return 1/0\n\ng()", false, "", "", "ZeroDivisionError: division by zero", 1},
		{"syntax error", "def (:", false, "", "", "SyntaxError", 1},
		{"sys.exit keeps session", "import sys; sys.exit(3)", false, "", "", "", 3},
		{"sys.exit(0) is success", "import sys; sys.exit(0)", true, "", "", "", 0},
		{"sys.exit(None) is success", "raise SystemExit", true, "", "", "", 0},
		{"sys.exit with a message", "import sys; sys.exit('bad')", false, "", "", "", 1},
		{"still alive", "x", true, "41", "", "", 0},
		{"stderr", "import sys; print('e', file=sys.stderr)", true, "", "", "", 0},
		{"unicode", "print('héllo ✓')\n'ü'", true, "'ü'", "héllo ✓\n", "", 0},
		{"stdin is empty", "import sys; sys.stdin.read()", true, "''", "", "", 0},
	}
	for _, tt := range tests { // sequential: cells share globals
		res := repl(t, c, tt.code, 0)
		if res.OK != tt.ok || res.Value != tt.value || res.Stdout != tt.stdout || !strings.Contains(res.Error, tt.error) || res.ExitCode != tt.exit {
			t.Errorf("%s: got ok=%v value=%q stdout=%q error=%q exit %d", tt.name, res.OK, res.Value, res.Stdout, res.Error, res.ExitCode)
		}
		if res.Restarted || res.TimedOut {
			t.Errorf("%s: restarted=%v timedout=%v", tt.name, res.Restarted, res.TimedOut)
		}
		if !tt.ok && strings.Contains(res.Error, "repl.py") || strings.Contains(res.Error, "<string>") {
			t.Errorf("%s: traceback shows the wrapper: %s", tt.name, res.Error)
		}
	}
	res := repl(t, c, "def g():\n    return 1/0\n\ng()", 0)
	want := "Traceback (most recent call last):\n  File \"<cell-"
	if !strings.HasPrefix(res.Error, want) || !strings.Contains(res.Error, "return 1/0") {
		t.Errorf("traceback:\n%s", res.Error)
	}
}

func TestREPLStreams(t *testing.T) {
	needPython(t)
	t.Parallel()
	// Timing-independent: the cell blocks after its first line until the
	// client has received that line (the callback creates a file the cell
	// waits for), so the test passes only when output is streamed before
	// the cell ends, however loaded the machine is.
	gate := filepath.Join(t.TempDir(), "seen")
	c, _ := startServer(t, ServerOptions{})
	var mu sync.Mutex
	var got bytes.Buffer
	res, err := c.REPL(testCtx(t, 60*time.Second), REPLRequest{
		Code:    "import time, os, sys\nprint('a')\nfor _ in range(3000):\n    if os.path.exists(" + strconv.Quote(gate) + "): break\n    time.sleep(0.01)\nelse:\n    print('not streamed')\nprint('b', end='')\nos.write(1, b'')\nsys.stdout.write('c\\n')",
		Timeout: 50 * time.Second,
	}, func(s string, b []byte) {
		mu.Lock()
		defer mu.Unlock()
		if got.Len() == 0 {
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Error(err)
			}
		}
		got.Write(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "a\nbc\n" || got.String() != res.Stdout {
		t.Errorf("stdout %q, streamed %q", res.Stdout, got.String())
	}
}

func TestREPLRawFDOutput(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	res := repl(t, c, "import os, subprocess\nsubprocess.run(['echo', 'from child'])\nimport time; time.sleep(0.2)", 0)
	if !res.OK || !strings.Contains(res.Stdout, "from child") {
		t.Errorf("res = %+v", res)
	}
}

func TestREPLOutputCap(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	res, err := c.REPL(testCtx(t, 30*time.Second), REPLRequest{Code: "for i in range(100000): print(i)", OutputLimit: 100}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.Stdout, "0\n1\n") || !strings.HasSuffix(res.Stdout, "99999\n") || !strings.Contains(res.Stdout, "truncated") || len(res.Stdout) > 200 {
		t.Errorf("stdout %q", res.Stdout)
	}
}

func TestREPLTimeoutKeepsState(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	repl(t, c, "keep = 'yes'", 0)
	start := time.Now()
	res := repl(t, c, "n = 0\nwhile True:\n    n += 1", 300*time.Millisecond)
	if !res.TimedOut || res.OK || res.Restarted || !strings.Contains(res.Error, "KeyboardInterrupt") {
		t.Errorf("res = %+v", res)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("interrupt took %v", d)
	}
	res = repl(t, c, "keep, n > 0", 0)
	if res.Value != "('yes', True)" || res.Restarted {
		t.Errorf("after interrupt: %+v", res)
	}
}

func TestREPLCancelInterrupts(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	repl(t, c, "keep = 1", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.REPL(ctx, REPLRequest{Code: "import time\nwhile True: time.sleep(0.01)"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	res := repl(t, c, "keep", 0)
	if res.Value != "1" || res.Restarted {
		t.Errorf("after cancel: %+v", res)
	}
}

func TestREPLIgnoredInterruptRestarts(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	repl(t, c, "lost = 1", 0)
	start := time.Now()
	res := repl(t, c, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", 200*time.Millisecond)
	if !res.TimedOut || !res.Restarted || res.OK {
		t.Errorf("res = %+v", res)
	}
	if d := time.Since(start); d > interruptGrace+2*time.Second {
		t.Errorf("took %v", d)
	}
	res = repl(t, c, "'lost' in globals()", 0)
	if res.Value != "False" || res.Restarted {
		t.Errorf("fresh interpreter: %+v", res)
	}
}

func TestREPLInterpreterDeath(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	for _, code := range []string{"import os; os._exit(7)", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"} {
		repl(t, c, "lost = 1", 0)
		res := repl(t, c, code, 0)
		if res.OK || res.Error == "" {
			t.Errorf("%s: res = %+v", code, res)
		}
		res = repl(t, c, "'lost' in globals()", 0)
		if res.Value != "False" || !res.Restarted || !res.OK {
			t.Errorf("%s: next call: %+v", code, res)
		}
		res = repl(t, c, "1", 0)
		if res.Restarted {
			t.Errorf("%s: restarted reported twice", code)
		}
	}
}

func TestREPLConcurrentCellsSerialise(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	repl(t, c, "count = 0", 0)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			res, err := c.REPL(testCtx(t, 30*time.Second), REPLRequest{Code: "v = count\ncount = v + 1"}, nil)
			if err != nil || !res.OK {
				t.Errorf("%+v %v", res, err)
			}
		})
	}
	wg.Wait()
	if res := repl(t, c, "count", 0); res.Value != "10" {
		t.Errorf("count = %q", res.Value)
	}
}

func TestREPLMatplotlib(t *testing.T) {
	needPython(t)
	if err := exec.Command(testPython, "-c", "import matplotlib").Run(); err != nil {
		t.Skip("matplotlib is not installed for " + testPython + " (apt-get install python3-matplotlib to run this test)")
	}
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	res := repl(t, c, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.figure()\nplt.bar([1], [2])\nplt.show()", 60*time.Second)
	if !res.OK || len(res.Artifacts) != 2 {
		t.Fatalf("res = %+v", res)
	}
	for _, a := range res.Artifacts {
		if a.MimeType != "image/png" || !bytes.HasPrefix(a.Data, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("artifact %s %s %d bytes", a.Name, a.MimeType, len(a.Data))
		}
	}
	if res := repl(t, c, "plt.get_fignums()", 0); res.Value != "[]" || len(res.Artifacts) != 0 {
		t.Errorf("figures not closed: %+v", res)
	}
}

func TestREPLNoPython(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{PythonPath: "/nonexistent/python3"})
	_, err := c.REPL(testCtx(t, 10*time.Second), REPLRequest{Code: "1"}, nil)
	var re *RemoteError
	if !errors.As(err, &re) || re.Op != "repl" {
		t.Fatalf("err = %v, want a RemoteError", err)
	}
}

func TestREPLLargeOutputAndValue(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	res := repl(t, c, "s = 'x' * 5_000_000\nprint(s)\nlen(s)", 0)
	if !res.OK || res.Value != "5000000" || !strings.Contains(res.Stdout, "truncated") || len(res.Stdout) > DefaultOutputLimit+100 {
		t.Errorf("big print: ok=%v value=%q stdout %d bytes", res.OK, res.Value, len(res.Stdout))
	}
	res = repl(t, c, "list(range(1_000_000))", 0)
	if !res.OK || !strings.HasPrefix(res.Value, "[0, 1, 2") || !strings.HasSuffix(res.Value, "999999]") || !strings.Contains(res.Value, "characters truncated") || len(res.Value) > 300_000 {
		t.Errorf("big value: ok=%v %d bytes", res.OK, len(res.Value))
	}
	res = repl(t, c, "import subprocess\nsubprocess.run(['sh', '-c', 'echo to-stderr >&2'])\nimport time; time.sleep(0.2)\ns[:3]", 0)
	if res.Restarted || res.Value != "'xxx'" || !strings.Contains(res.Stderr, "to-stderr") {
		t.Errorf("after big output: %+v", res)
	}
}

func TestREPLImportsFromRoot(t *testing.T) {
	needPython(t)
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	if err := c.WriteFile(testCtx(t, 10*time.Second), "mymod.py", []byte("X = 7\n"), 0); err != nil {
		t.Fatal(err)
	}
	if res := repl(t, c, "import mymod\nmymod.X", 0); res.Value != "7" {
		t.Errorf("res = %+v", res)
	}
}
