package job

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/tools"
)

// memStore keeps jobs and events in memory: enough of a Store for a
// service that runs in-process tools.
type memStore struct {
	eventStore
	jmu  sync.Mutex
	jobs map[string]*Job
}

func (m *memStore) Create(_ context.Context, j *Job) error {
	m.jmu.Lock()
	defer m.jmu.Unlock()
	m.jobs[j.ID] = cloneJob(j)
	return nil
}

func (m *memStore) Update(ctx context.Context, j *Job) error { return m.Create(ctx, j) }

func (m *memStore) Get(_ context.Context, id string) (*Job, error) {
	m.jmu.Lock()
	defer m.jmu.Unlock()
	if j, ok := m.jobs[id]; ok {
		return cloneJob(j), nil
	}
	return nil, ErrNotFound
}

func (m *memStore) ListEvents(_ context.Context, id string, after, limit int) ([]EventRecord, error) {
	var out []EventRecord
	for _, ev := range m.stored(id) {
		if ev.Seq > after && len(out) < max(limit, 1) {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (m *memStore) ListUnfinished(context.Context) ([]*Job, error)            { return nil, nil }
func (m *memStore) ListOpenSessions(context.Context) ([]*Session, error)      { return nil, nil }
func (m *memStore) ListPendingApprovals(context.Context) ([]*Approval, error) { return nil, nil }
func (m *memStore) ListPendingCallbacks(context.Context) ([]*Job, error)      { return nil, nil }
func (m *memStore) DeleteFinishedJobs(context.Context, time.Time, time.Time, int) (Deleted, error) {
	return Deleted{}, nil
}
func (m *memStore) Size(context.Context) (StoreSize, error) { return StoreSize{}, nil }
func (m *memStore) Compact(context.Context) (int64, error)  { return 0, nil }

// TestFinishedJobsLeaveMemory: once a job's finished event is committed
// its entry goes; the old service kept the last 64 finished jobs with up
// to 256 events each (7 MB per flooding job).
func TestFinishedJobsLeaveMemory(t *testing.T) {
	t.Parallel()
	reg := tools.NewRegistry()
	if err := reg.Register(&tools.Tool{Name: "noop", Run: func(context.Context, tools.Env, map[string]any) (tools.Result, error) {
		return tools.Result{OK: true, Content: "ok"}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	st := &memStore{jobs: map[string]*Job{}}
	s, err := New(Config{WorkDir: t.TempDir(), Retention: config.Retention{Interval: time.Hour}}, st, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	var last *Job
	for range 200 {
		j, _, err := s.Submit(t.Context(), "acme", SubmitRequest{Call: tools.Call{Name: "noop", Arguments: []byte(`{}`)}})
		if err != nil {
			t.Fatal(err)
		}
		last = j
		if _, err := s.Wait(t.Context(), "acme", j.ID); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.emu.Lock()
		n := len(s.entries)
		s.emu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d finished jobs still in memory", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Their events are in the store, finished included.
	evs := st.stored(last.ID)
	if len(evs) != 3 || evs[2].Type != EventFinished {
		t.Fatalf("stored events of the last job: %+v", evs)
	}
}
