package runnertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
)

// testLongLived: a LongLived process (an MCP server on its stdio) is a
// conversation: each line written to its stdin is answered before the
// next one is written (stdin streams; it is not read whole first), it
// outlives the sandbox's timeout, and closing its stdin ends it.
func (s *suite) testLongLived(t *testing.T) {
	sb := s.sandbox(t, runner.SandboxSpec{Limits: runner.Limits{Timeout: time.Second}})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	type res struct {
		r   runner.Result
		err error
	}
	done := make(chan res, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		r, err := sb.Exec(ctx, runner.Process{
			Args:      []string{"/bin/sh", "-c", `while read -r l; do echo "got $l"; done`},
			Env:       []string{"PATH=/usr/bin:/bin"},
			Stdin:     inR,
			Stdout:    outW,
			LongLived: true,
		})
		outW.Close()
		done <- res{r, err}
	}()
	rd := bufio.NewReader(outR)
	for i := range 3 {
		if i == 2 {
			time.Sleep(1500 * time.Millisecond) // past the sandbox's 1s timeout
		}
		fmt.Fprintf(inW, "line %d\n", i)
		got, err := rd.ReadString('\n')
		if err != nil || got != fmt.Sprintf("got line %d\n", i) {
			t.Fatalf("answer %d: %q %v", i, got, err)
		}
	}
	inW.Close()
	select {
	case r := <-done:
		if r.err != nil || r.r.ExitCode != 0 || r.r.TimedOut {
			t.Fatalf("result %+v, err %v", r.r, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process did not end when its stdin closed")
	}
}
