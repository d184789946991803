package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// TestExecLongLived: a long-lived exec is a conversation over stdio: each
// line written to its stdin is answered before the next is sent (stdin is
// streamed, not read whole first), all output reaches the caller beyond
// the result's cap, no timeout applies, and closing stdin ends it.
func TestExecLongLived(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	type res struct {
		r   ExecResult
		err error
	}
	done := make(chan res, 1)
	go func() {
		r, err := c.Exec(testCtx(t, 30*time.Second), ExecRequest{
			// Answer each line with the line, and once with 3 MiB (more
			// than MaxOutputLimit) to see nothing is cut.
			Args:        []string{"/bin/sh", "-c", `while read -r l; do if [ "$l" = big ]; then head -c 3145728 /dev/zero | tr '\0' x; echo; else echo "got $l"; fi; done`},
			LongLived:   true,
			StdinStream: inR,
			OutputLimit: 1024,
		}, func(stream string, chunk []byte) {
			if stream == "stdout" {
				outW.Write(chunk)
			}
		})
		outW.Close()
		done <- res{r, err}
	}()
	rd := bufio.NewReaderSize(outR, 4<<20)
	for i := range 3 {
		fmt.Fprintf(inW, "line %d\n", i)
		got, err := rd.ReadString('\n')
		if err != nil || got != fmt.Sprintf("got line %d\n", i) {
			t.Fatalf("answer %d: %q %v", i, got, err)
		}
	}
	fmt.Fprintln(inW, "big")
	big, err := rd.ReadString('\n')
	if err != nil || len(big) != 3<<20+1 || strings.Trim(big, "x\n") != "" {
		t.Fatalf("big answer: %d bytes, %v", len(big), err)
	}
	inW.Close() // EOF: the loop ends
	r := <-done
	if r.err != nil || r.r.ExitCode != 0 || r.r.TimedOut || !r.r.StdoutTruncated {
		t.Fatalf("result %+v %v", r.r, r.err)
	}
	if _, err := c.Exec(testCtx(t, 5*time.Second), ExecRequest{Args: []string{"/bin/true"}, LongLived: true, Timeout: time.Second}, nil); err == nil {
		t.Error("a long-lived exec with a timeout was accepted")
	}
}

// TestExecLongLivedCancel: cancelling the context kills a long-lived
// process that never ends on its own.
func TestExecLongLivedCancel(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	ctx := testCtx(t, 30*time.Second)
	inR, _ := io.Pipe()
	cctx, cancel := contextWithCancel(ctx)
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	start := time.Now()
	_, err := c.Exec(cctx, ExecRequest{Args: []string{"/bin/sleep", "60"}, LongLived: true, StdinStream: inR}, nil)
	if err == nil || time.Since(start) > 10*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("connection unusable after the cancel: %v", err)
	}
}

func contextWithCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}
