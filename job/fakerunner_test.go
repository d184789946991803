package job_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
)

// fakeRunner is a tiny test double (runner/fake may replace it). Exec
// interprets Args[0]:
//
//	echo WORDS...  prints WORDS to stdout, exit 0
//	exit N         prints "bye" to stderr, exits N
//	sleep D        sleeps D (Go duration); honours Process.Timeout
//	block          waits until ctx is cancelled (killed: SIGKILL)
//	error          fails with an infrastructure error
//	flood N        writes N bytes of numbered lines to stdout, 4 KiB a write
type fakeRunner struct {
	mu      sync.Mutex
	specs   []runner.SandboxSpec
	alive   int
	reaped  int
	started chan string // receives the sandbox ID when Exec starts (if non-nil)
	// createFails makes the next N Creates fail (the runner is unavailable).
	createFails atomic.Int64
	// createDelay is how long each Create takes (a loaded host).
	createDelay time.Duration
	// cpuCaps are the tenants' CPU caps (CapTenantCPU), in thousandths
	// of a core.
	cpuCaps map[string]int64
}

var (
	_ runner.Runner          = (*fakeRunner)(nil)
	_ runner.Reaper          = (*fakeRunner)(nil)
	_ runner.TenantCPUCapper = (*fakeRunner)(nil)
)

func (r *fakeRunner) CapTenantCPU(tenant string, _ int, millis int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cpuCaps == nil {
		r.cpuCaps = map[string]int64{}
	}
	if millis == 0 {
		delete(r.cpuCaps, tenant)
	} else {
		r.cpuCaps[tenant] = millis
	}
	return nil
}

func (r *fakeRunner) caps() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.cpuCaps)
}

func (r *fakeRunner) Name() string                      { return "fake" }
func (r *fakeRunner) Capabilities() runner.Capabilities { return runner.Capabilities{Network: true} }

func (r *fakeRunner) Reap(context.Context) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reaped++
	return 0, nil
}

func (r *fakeRunner) Create(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.createFails.Add(-1) >= 0 {
		return nil, errors.New("runner unavailable")
	}
	r.createFails.Store(0)
	time.Sleep(r.createDelay)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs = append(r.specs, spec)
	r.alive++
	return &fakeSandbox{r: r, id: spec.ID}, nil
}

func (r *fakeRunner) spec(id string) (runner.SandboxSpec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.specs {
		if s.ID == id {
			return s, true
		}
	}
	return runner.SandboxSpec{}, false
}

func (r *fakeRunner) aliveCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.alive
}

type fakeSandbox struct {
	r      *fakeRunner
	id     string
	mu     sync.Mutex
	closed bool
}

func (s *fakeSandbox) ID() string { return s.id }

func (s *fakeSandbox) Stats(context.Context) (runner.Usage, error) { return runner.Usage{}, nil }

func (s *fakeSandbox) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.r.mu.Lock()
		s.r.alive--
		s.r.mu.Unlock()
	}
	return nil
}

func (s *fakeSandbox) Exec(ctx context.Context, p runner.Process) (runner.Result, error) {
	if s.r.started != nil {
		s.r.started <- s.id
	}
	start := time.Now()
	var res runner.Result
	out := func(w io.Writer, buf *[]byte, text string) {
		*buf = append(*buf, text...)
		if w != nil {
			w.Write([]byte(text))
		}
	}
	switch p.Args[0] {
	case "echo":
		out(p.Stdout, &res.Stdout, strings.Join(p.Args[1:], " "))
	case "exit":
		out(p.Stderr, &res.Stderr, "bye")
		res.ExitCode, _ = strconv.Atoi(p.Args[1])
	case "sleep", "block":
		d := time.Hour
		if p.Args[0] == "sleep" {
			d, _ = time.ParseDuration(p.Args[1])
		}
		var timeout <-chan time.Time
		if p.Timeout > 0 {
			timeout = time.After(p.Timeout)
		}
		select {
		case <-time.After(d):
		case <-timeout:
			res.TimedOut, res.Signal, res.ExitCode, res.KilledAt = true, "SIGKILL", -1, time.Now()
		case <-ctx.Done():
			res.Signal, res.ExitCode = "SIGKILL", -1
		}
	case "error":
		return runner.Result{}, errors.New("sandbox agent vanished")
	case "flood":
		n, _ := strconv.Atoi(p.Args[1])
		var b strings.Builder
		for i := 0; b.Len() < n; i++ {
			fmt.Fprintf(&b, "line %07d\n", i)
		}
		text := b.String()[:n]
		for len(text) > 0 {
			c := min(len(text), 4096)
			if p.Stdout != nil {
				p.Stdout.Write([]byte(text[:c]))
			}
			text = text[c:]
		}
		res.Stdout = []byte("flooded")
	default:
		return runner.Result{}, fmt.Errorf("%w: unknown fake command %q", runner.ErrInvalidSpec, p.Args[0])
	}
	res.Duration = time.Since(start)
	return res, nil
}

// nopEgress is an egress provider that refuses every connection; it lets
// tools with the http effect get a sandbox in unit tests.
type nopEgress struct{ calls atomic.Int64 }

func (n *nopEgress) For(tenant, session string, record func(job.EgressRecord)) runner.Egress {
	n.calls.Add(1)
	return nopServe{}
}

type nopServe struct{}

func (nopServe) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		c.Close()
	}
}
