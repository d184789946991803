package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/store"
	"github.com/sandboxd/sandboxd/store/pgtest"
	"github.com/sandboxd/sandboxd/tools"
)

// The guard lives here because job must not import api.
var _ api.JobService = (*job.Service)(nil)

// cacheRuns counts the runs of the "sum" tool.
var cacheRuns atomic.Int64

// testTools are the tools every harness registers.
func testTools(t testing.TB, gate chan struct{}) *tools.Registry {
	t.Helper()
	obj := func(props string, required ...string) json.RawMessage {
		req, _ := json.Marshal(required)
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `}`)
	}
	str := func(args map[string]any, k string) string { s, _ := args[k].(string); return s }
	reg := tools.NewRegistry()
	for _, tool := range []*tools.Tool{
		{
			Name: "echo", Effects: []tools.Effect{tools.EffectExec},
			InputSchema: obj(`"text":{"type":"string"}`, "text"),
			Command: func(a map[string]any) (tools.Command, error) {
				return tools.Command{Args: []string{"echo", str(a, "text")}}, nil
			},
		},
		{
			Name: "sh", Effects: []tools.Effect{tools.EffectExec, tools.EffectFileWrite, tools.EffectHTTP},
			InputSchema: obj(`"cmd":{"type":"string"},"arg":{"type":"string"},"timeout_ms":{"type":"integer"}`, "cmd"),
			Command: func(a map[string]any) (tools.Command, error) {
				if str(a, "cmd") == "refuse" {
					return tools.Command{}, errors.New("refusing this command")
				}
				ms, _ := a["timeout_ms"].(float64)
				return tools.Command{Args: []string{str(a, "cmd"), str(a, "arg")}, Timeout: time.Duration(ms) * time.Millisecond}, nil
			},
		},
		{
			Name: "reader", Effects: []tools.Effect{tools.EffectExec, tools.EffectFileRead},
			Command: func(map[string]any) (tools.Command, error) {
				return tools.Command{Args: []string{"echo", "read"}}, nil
			},
		},
		{
			Name:        "add",
			InputSchema: obj(`"a":{"type":"number"},"b":{"type":"number"}`, "a", "b"),
			Run: func(_ context.Context, _ tools.Env, a map[string]any) (tools.Result, error) {
				return tools.Result{OK: true, Content: fmt.Sprint(a["a"].(float64) + a["b"].(float64))}, nil
			},
		},
		{
			Name: "oops",
			Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
				return tools.Result{}, errors.New("division by zero")
			},
		},
		{
			Name: "panic",
			Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
				panic("tool bug")
			},
		},
		{
			// write checks it got a writable workspace and writes a file.
			Name: "write", Effects: []tools.Effect{tools.EffectFileWrite},
			Run: func(_ context.Context, env tools.Env, _ map[string]any) (tools.Result, error) {
				if env.Workspace == "" || env.ReadOnly {
					return tools.Result{OK: false, Error: fmt.Sprintf("workspace %q read-only %v", env.Workspace, env.ReadOnly)}, nil
				}
				if err := os.WriteFile(filepath.Join(env.Workspace, "f"), []byte("x"), 0o644); err != nil {
					return tools.Result{}, err
				}
				return tools.Result{OK: true, Content: env.Workspace}, nil
			},
		},
		{
			// wait blocks until gate is closed or its context ends.
			Name: "wait",
			Run: func(ctx context.Context, _ tools.Env, _ map[string]any) (tools.Result, error) {
				select {
				case <-gate:
					return tools.Result{OK: true, Content: "released"}, nil
				case <-ctx.Done():
					return tools.Result{}, ctx.Err()
				}
			},
		},
		{
			// sum is a cacheable "add" counting its runs (cacheRuns).
			Name: "sum", Cache: &tools.CachePolicy{},
			InputSchema: obj(`"a":{"type":"number"},"b":{"type":"number"}`, "a", "b"),
			Run: func(_ context.Context, _ tools.Env, a map[string]any) (tools.Result, error) {
				cacheRuns.Add(1)
				return tools.Result{OK: true, Content: fmt.Sprint(a["a"].(float64) + a["b"].(float64))}, nil
			},
		},
		{
			// peek is a cacheable read-only file tool: it reads f.
			Name: "peek", Effects: []tools.Effect{tools.EffectFileRead}, Cache: &tools.CachePolicy{},
			Run: func(_ context.Context, env tools.Env, _ map[string]any) (tools.Result, error) {
				b, err := os.ReadFile(filepath.Join(env.Workspace, "f"))
				if err != nil {
					return tools.Result{}, err
				}
				return tools.Result{OK: true, Content: string(b)}, nil
			},
		},
		{Name: "declared"}, // declaration only
	} {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// harnessStore is the store a harness runs on: SQLite, or Postgres
// (onPostgres).
type harnessStore interface {
	job.Store
	Close() error
}

type harness struct {
	svc   *job.Service
	st    harnessStore
	pgURL string // onPostgres: the database
	r     *fakeRunner
	prom  *prometheus.Registry
	gate  chan struct{} // closing it releases "wait" jobs
	dir   string
	start bool
}

type option func(*job.Config, *harness)

func notStarted(_ *job.Config, h *harness) { h.start = false }

// inDir keeps the harness's database in dir (a restart opens it again).
func inDir(dir string) option { return func(_ *job.Config, h *harness) { h.dir = dir } }

// onPostgres runs the harness on a Postgres database (the test binary's
// shared server): url, or a new database when url is "". A store on
// Postgres spends the guard's units in the store (job.AtomicSpender).
func onPostgres(t testing.TB, url string) option {
	if url == "" {
		url = pgtest.Shared(t).NewDatabase(t)
	}
	return func(_ *job.Config, h *harness) { h.pgURL = url }
}

// bothStores runs f on SQLite and on Postgres (store is the option that
// picks the store; a test restarting the service passes it each time).
func bothStores(t *testing.T, f func(t *testing.T, store func() option)) {
	t.Run("sqlite", func(t *testing.T) {
		f(t, func() option { return func(*job.Config, *harness) {} })
	})
	t.Run("postgres", func(t *testing.T) {
		url := pgtest.Shared(t).NewDatabase(t)
		f(t, func() option { return onPostgres(t, url) })
	})
}

func TestMain(m *testing.M) { pgtest.Main(m) }

// close shuts the service down and closes the store (before a restart).
func (h *harness) close(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.svc.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	h.st.Close()
}

func newHarness(t testing.TB, opts ...option) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{r: &fakeRunner{}, prom: prometheus.NewRegistry(), gate: make(chan struct{}), dir: dir, start: true}
	cfg := job.Config{Queue: config.Queue{Workers: 4, Size: 64}, WorkDir: filepath.Join(dir, "work"), Metrics: job.NewMetrics(h.prom),
		Egress: &nopEgress{}}
	for _, o := range opts {
		o(&cfg, h)
	}
	var st harnessStore
	var err error
	if h.pgURL != "" {
		st, err = store.OpenPostgres(t.Context(), h.pgURL)
	} else {
		st, err = store.Open(filepath.Join(h.dir, "jobs.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	h.svc, err = job.New(cfg, st, testTools(t, h.gate), h.r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-h.gate:
		default:
			close(h.gate)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.svc.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		st.Close()
	})
	if h.start {
		if err := h.svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func call(name, args string) job.SubmitRequest {
	return job.SubmitRequest{Call: tools.Call{Name: name, Arguments: json.RawMessage(args)}}
}

func (h *harness) submit(t *testing.T, tenant string, req job.SubmitRequest) *job.Job {
	t.Helper()
	j, created, err := h.svc.Submit(t.Context(), tenant, req)
	if err != nil {
		t.Fatalf("Submit %s: %v", req.Call.Name, err)
	}
	if !created {
		t.Fatalf("Submit %s: created = false", req.Call.Name)
	}
	return j
}

func (h *harness) wait(t *testing.T, tenant, id string) *job.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	j, err := h.svc.Wait(ctx, tenant, id)
	if err != nil {
		t.Fatalf("Wait %s: %v", id, err)
	}
	return j
}

// waitRunning polls until the job is running.
func (h *harness) waitRunning(t *testing.T, tenant, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		j, err := h.svc.Get(t.Context(), tenant, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == job.StateRunning {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("job %s never ran", id)
}
