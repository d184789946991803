package job_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/fake"
	"github.com/sandboxd/sandboxd/store"
	"github.com/sandboxd/sandboxd/tools"
)

// sessionTools: sh (exec, file_read, file_write), cat (in-process,
// file_read), python_repl (sandboxed; "code" is run by sh unless the
// sandbox has a REPL), fetch (http).
func sessionTools(t *testing.T) *tools.Registry {
	t.Helper()
	reg := tools.NewRegistry()
	obj := `{"type":"object","properties":{"cmd":{"type":"string"},"code":{"type":"string"},"path":{"type":"string"}}}`
	rw := []tools.Effect{tools.EffectExec, tools.EffectFileRead, tools.EffectFileWrite}
	for _, tl := range []*tools.Tool{
		{Name: "sh", InputSchema: json.RawMessage(obj), Effects: rw,
			Command: func(a map[string]any) (tools.Command, error) {
				c, _ := a["cmd"].(string)
				return tools.Command{Args: []string{"/bin/sh", "-c", c}}, nil
			}},
		{Name: "python_repl", InputSchema: json.RawMessage(obj), Effects: rw,
			Command: func(a map[string]any) (tools.Command, error) {
				c, _ := a["code"].(string)
				return tools.Command{Args: []string{"/bin/sh", "-c", c}}, nil
			}},
		{Name: "cat", InputSchema: json.RawMessage(obj), Effects: []tools.Effect{tools.EffectFileRead},
			Run: func(_ context.Context, env tools.Env, a map[string]any) (tools.Result, error) {
				p, _ := a["path"].(string)
				b, err := os.ReadFile(filepath.Join(env.Workspace, p))
				if err != nil {
					return tools.Result{OK: false, Error: err.Error()}, nil
				}
				return tools.Result{OK: true, Content: string(b)}, nil
			}},
		{Name: "fetch", InputSchema: json.RawMessage(obj), Effects: []tools.Effect{tools.EffectHTTP},
			Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
				return tools.Result{OK: true}, nil
			}},
	} {
		if err := reg.Register(tl); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

type sessHarness struct {
	svc  *job.Service
	st   *store.SQLite
	r    runner.Runner
	fr   *fake.Runner
	prom *prometheus.Registry
	work string
}

func newSessHarness(t *testing.T, r runner.Runner, cfg job.Config) *sessHarness {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	h := &sessHarness{st: st, prom: prometheus.NewRegistry(), work: filepath.Join(dir, "work")}
	if cfg.Workspaces != nil {
		h.work = cfg.Workspaces.Root()
	}
	if r == nil {
		h.fr = fake.New()
		r = h.fr
	}
	h.r = r
	cfg.WorkDir, cfg.Metrics = h.work, job.NewMetrics(h.prom)
	if cfg.Egress == nil {
		cfg.Egress = &nopEgress{}
	}
	if cfg.Queue.Workers == 0 {
		cfg.Queue.Workers = 4
	}
	h.svc, err = job.New(cfg, st, sessionTools(t), r)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.svc.Shutdown(ctx)
		st.Close()
	})
	return h
}

func (h *sessHarness) run(t *testing.T, tenant, session, tool, args string) *job.Job {
	t.Helper()
	req := job.SubmitRequest{Call: tools.Call{Name: tool, Arguments: json.RawMessage(args)}, SessionID: session}
	j, _, err := h.svc.Submit(t.Context(), tenant, req)
	if err != nil {
		t.Fatalf("submit %s: %v", tool, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	j, err = h.svc.Wait(ctx, tenant, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestSessionCallRecordedRunningLate: a session's call is written running
// only once it has run lazyRunningAfter (a short call's finished record is
// its one write after the insert); a longer one is seen running in the
// store while it runs, and Get answers from memory meanwhile.
func TestSessionCallRecordedRunningLate(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	req := job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"sleep 0.6"}`)}, SessionID: s.ID}
	j, _, err := h.svc.Submit(ctx, "acme", req)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(500 * time.Millisecond)
	for {
		if got, err := h.svc.Get(ctx, "acme", j.ID); err == nil && got.State == job.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Get never answered running")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		rec, err := h.st.Get(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == job.StateRunning && rec.StartedAt != nil {
			break
		}
		if rec.State.Terminal() || time.Now().After(deadline) {
			t.Fatalf("the store never had the long call running: %+v", rec)
		}
		time.Sleep(5 * time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done, err := h.svc.Wait(wctx, "acme", j.ID)
	if err != nil || done.State != job.StateSucceeded {
		t.Fatalf("long call: %+v %v", done, err)
	}
	if rec, err := h.st.Get(ctx, j.ID); err != nil || rec.State != job.StateSucceeded || rec.StartedAt == nil {
		t.Fatalf("record after: %+v %v", rec, err)
	}
}

func TestSessionLifecycle(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != job.SessionActive || !strings.HasPrefix(s.ID, "ses_") || len(s.Effects) != 3 {
		t.Fatalf("session = %+v", s)
	}
	if j := h.run(t, "acme", s.ID, "sh", `{"cmd":"echo hello > f.txt"}`); j.State != job.StateSucceeded || j.SessionID != s.ID {
		t.Fatalf("sh: %+v %+v", j, j.Result)
	}
	if j := h.run(t, "acme", s.ID, "cat", `{"path":"f.txt"}`); j.Result.Content != "hello\n" {
		t.Fatalf("cat: %+v", j.Result)
	}
	// Files in and out.
	if _, err := h.svc.PutFile(ctx, "acme", s.ID, "dir/up.txt", strings.NewReader("up")); err != nil {
		t.Fatal(err)
	}
	if j := h.run(t, "acme", s.ID, "sh", `{"cmd":"cat dir/up.txt"}`); j.Result.Content != "up" {
		t.Fatalf("uploaded file: %+v", j.Result)
	}
	rc, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, "/workspace/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hello\n" {
		t.Fatalf("OpenFile = %q", b)
	}
	_, _, list, err := h.svc.OpenFile(ctx, "acme", s.ID, "")
	if err != nil || len(list) != 2 {
		t.Fatalf("listing = %+v, %v", list, err)
	}
	var tarBuf bytes.Buffer
	if err := h.svc.GetArchive(ctx, "acme", s.ID, ".", &tarBuf); err != nil || tarBuf.Len() == 0 {
		t.Fatalf("GetArchive: %v", err)
	}
	// Other tenants see nothing.
	if _, err := h.svc.GetSession(ctx, "other", s.ID); !errors.Is(err, job.ErrSessionNotFound) {
		t.Fatalf("other tenant GetSession: %v", err)
	}
	if _, _, err := h.svc.Submit(ctx, "other", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"true"}`)}, SessionID: s.ID}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("other tenant submit: %v", err)
	}
	if testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_sessions_active")) != 1 {
		t.Fatal("sessions_active != 1")
	}
	dir := filepath.Join(h.work, "sessions", s.ID)
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	closed, err := h.svc.CloseSession(ctx, "acme", s.ID)
	if err != nil || closed.State != job.SessionClosed || closed.Reason != job.SessionReasonDeleted {
		t.Fatalf("close: %+v %v", closed, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("workspace still there: %v", err)
	}
	if got, _ := h.svc.GetSession(ctx, "acme", s.ID); got.State != job.SessionClosed {
		t.Fatalf("after close: %+v", got)
	}
	if _, _, err := h.svc.Submit(ctx, "acme", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"true"}`)}, SessionID: s.ID}); !errors.Is(err, job.ErrSessionClosed) {
		t.Fatalf("submit to closed session: %v", err)
	}
	if h.fr.Created() != 1 || h.fr.Closed() != 1 {
		t.Fatalf("created %d closed %d", h.fr.Created(), h.fr.Closed())
	}
	list2, _, err := h.svc.ListSessions(ctx, "acme", job.SessionFilter{})
	if err != nil || len(list2) != 1 {
		t.Fatalf("ListSessions = %v, %v", list2, err)
	}
}

func mustGauge(t *testing.T, g prometheus.Gatherer, name string) prometheus.Collector {
	t.Helper()
	return gathered{g, name}
}

// gathered adapts one metric family of a Gatherer to testutil.ToFloat64
// (the sum over its label values).
type gathered struct {
	g    prometheus.Gatherer
	name string
}

func (c gathered) Describe(ch chan<- *prometheus.Desc) {}
func (c gathered) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := c.g.Gather()
	var v float64 // summed over the label values; 0 when none exist yet
	for _, mf := range mfs {
		if mf.GetName() == c.name {
			for _, m := range mf.GetMetric() {
				v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(c.name, "", nil, nil), prometheus.UntypedValue, v)
}

func TestSessionEffects(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{Effects: []tools.Effect{tools.EffectExec, tools.EffectFileRead}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = h.svc.Submit(ctx, "acme", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"true"}`)}, SessionID: s.ID})
	if !errors.Is(err, job.ErrEffectNotAllowed) || !strings.Contains(err.Error(), "file_write") || !strings.Contains(err.Error(), s.ID) {
		t.Fatalf("sh in read-only session: %v", err)
	}
	if j := h.run(t, "acme", s.ID, "cat", `{"path":"nope"}`); j.State != job.StateFailed || j.Reason != job.ReasonToolError {
		t.Fatalf("cat: %+v", j)
	}
	if _, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{Effects: []tools.Effect{tools.EffectHTTP}}); !errors.Is(err, job.ErrUnsupported) {
		t.Fatalf("http session: %v", err)
	}
	if _, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{Effects: []tools.Effect{"teleport"}}); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("bad effect: %v", err)
	}
	// The failed http session was recorded and counted.
	list, _, _ := h.svc.ListSessions(ctx, "acme", job.SessionFilter{State: job.SessionFailed})
	if len(list) != 1 || list[0].Reason != job.SessionReasonCreate {
		t.Fatalf("failed sessions: %+v", list)
	}
}

func TestSessionTenantLimit(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{Sessions: config.Sessions{MaxPerTenant: 2}})
	ctx := t.Context()
	for range 2 {
		if _, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{}); !errors.Is(err, job.ErrSessionLimit) {
		t.Fatalf("third session: %v", err)
	}
	if _, err := h.svc.CreateSession(ctx, "other", job.SessionRequest{}); err != nil {
		t.Fatalf("other tenant: %v", err)
	}
}

func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{Sessions: config.Sessions{ReapInterval: 10 * time.Millisecond}})
	ctx := t.Context()
	ttl, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{TTL: 150 * time.Millisecond, IdleTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{TTL: time.Hour, IdleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Use keeps the idle session open past its idle timeout.
	for range 4 {
		time.Sleep(100 * time.Millisecond)
		h.run(t, "acme", idle.ID, "sh", `{"cmd":"true"}`)
	}
	if s, _ := h.svc.GetSession(ctx, "acme", idle.ID); s.State != job.SessionActive {
		t.Fatalf("used session closed: %+v", s)
	}
	if s, _ := h.svc.GetSession(ctx, "acme", ttl.ID); s.State != job.SessionClosed || s.Reason != job.SessionReasonExpired {
		t.Fatalf("ttl session: %+v", s)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		s, _ := h.svc.GetSession(ctx, "acme", idle.ID)
		if s.State == job.SessionClosed {
			if s.Reason != job.SessionReasonIdle {
				t.Fatalf("idle session: %+v", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("idle session never closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A session reads closed as soon as it takes no more jobs; its sandbox
	// is destroyed and the metrics move just after.
	eventually(t, "both sandboxes closed and counted", func() bool {
		return h.fr.Closed() == 2 &&
			testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_sessions_closed_total")) == 2 &&
			testutil.ToFloat64(mustGauge(t, h.prom, "sandboxd_sessions_active")) == 0
	})
	if h.fr.Closed() != 2 {
		t.Fatalf("closed %d sandboxes", h.fr.Closed())
	}
}

func TestSessionJobsRunInOrder(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{Queue: config.Queue{Workers: 8}})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 6 {
		args, _ := json.Marshal(map[string]string{"cmd": "echo start " + string(rune('0'+i)) + " >> log; sleep 0.03; echo end " + string(rune('0'+i)) + " >> log"})
		j, _, err := h.svc.Submit(ctx, "acme", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: args}, SessionID: s.ID})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		j, err := h.svc.Wait(wctx, "acme", id)
		cancel()
		if err != nil || j.State != job.StateSucceeded {
			t.Fatalf("job %s: %+v %v", id, j, err)
		}
	}
	rc, _, _, err := h.svc.OpenFile(ctx, "acme", s.ID, "log")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	var want strings.Builder
	for i := range 6 {
		c := string(rune('0' + i))
		want.WriteString("start " + c + "\nend " + c + "\n")
	}
	if string(b) != want.String() {
		t.Fatalf("log:\n%s\nwant:\n%s", b, want.String())
	}
}

func TestSessionWaitRespectsTimeout(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	long, _, err := h.svc.Submit(ctx, "acme", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"sleep 1"}`)}, SessionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	short := h.run(t, "acme", s.ID, "sh", `{"cmd":"true"}`)
	_ = long
	if short.State == job.StateSucceeded {
		// Fine only if it really ran after the long one.
		l, _ := h.svc.Get(ctx, "acme", long.ID)
		if !l.State.Terminal() {
			t.Fatal("second job ran while the first was running")
		}
	}
	j2, _, err := h.svc.Submit(ctx, "acme", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"sleep 2"}`)}, SessionID: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	j3, _, err := h.svc.Submit(ctx, "acme", job.SubmitRequest{Call: tools.Call{Name: "sh", Arguments: json.RawMessage(`{"cmd":"true"}`)},
		SessionID: s.ID, Limits: runner.Limits{Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := h.svc.Wait(wctx, "acme", j3.ID)
	if err != nil || got.State != job.StateFailed || got.Reason != job.ReasonTimeout || !strings.Contains(got.Result.Error, "waiting") {
		t.Fatalf("queued behind a long job: %+v %v", got.Result, err)
	}
	if g, _ := h.svc.Get(ctx, "acme", j2.ID); g.State.Terminal() {
		t.Fatalf("the long job finished first: %+v", g)
	}
}

func TestSessionLostOnRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fr := fake.New()
	cfg := job.Config{WorkDir: filepath.Join(dir, "work")}
	svc1, err := job.New(cfg, st, sessionTools(t), fr)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc1.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, err := svc1.CreateSession(t.Context(), "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// A second process over the same store finds the session of a dead one.
	svc2, err := job.New(cfg, st, sessionTools(t), fr)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc2.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := svc2.GetSession(t.Context(), "acme", s.ID)
	if err != nil || got.State != job.SessionClosed || got.Reason != job.SessionReasonLost {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "work", "sessions", s.ID)); !os.IsNotExist(err) {
		t.Fatalf("workspace of the lost session: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = svc2.Shutdown(ctx)
	_ = svc1.Shutdown(ctx)
}

func jobReq(tool, args string, l runner.Limits) job.SubmitRequest {
	return job.SubmitRequest{Call: tools.Call{Name: tool, Arguments: json.RawMessage(args)}, Limits: l}
}

// TestSessionLastUsedStored: a call moves a session's last use in memory at
// once; the store gets it at most every few seconds while the session
// lives (two writes per call cost more than a warm call), and exactly at
// close.
func TestSessionLastUsedStored(t *testing.T) {
	t.Parallel()
	h := newSessHarness(t, nil, job.Config{})
	ctx := t.Context()
	s, err := h.svc.CreateSession(ctx, "acme", job.SessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stored := func() time.Time {
		t.Helper()
		ss, err := h.st.GetSession(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ss.LastUsedAt
	}
	h.run(t, "acme", s.ID, "sh", `{"cmd":"true"}`)
	first := stored()
	if !first.After(s.LastUsedAt) {
		t.Fatalf("first call not stored: %v, created %v", first, s.LastUsedAt)
	}
	for range 5 {
		h.run(t, "acme", s.ID, "sh", `{"cmd":"true"}`)
	}
	live, err := h.svc.GetSession(ctx, "acme", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !live.LastUsedAt.After(first) {
		t.Fatalf("last use in memory %v, not after the first call's %v", live.LastUsedAt, first)
	}
	if got := stored(); !got.Equal(first) {
		t.Fatalf("store written on every call: %v, want still %v", got, first)
	}
	closed, err := h.svc.CloseSession(ctx, "acme", s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(); !got.Equal(closed.LastUsedAt) || !got.Equal(live.LastUsedAt) {
		t.Fatalf("stored at close %v, want %v", got, live.LastUsedAt)
	}
}
