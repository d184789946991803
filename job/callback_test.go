package job_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/store"
)

// receiver records callback deliveries; the first fail of them answer 503.
type receiver struct {
	mu   sync.Mutex
	got  []*http.Request
	body [][]byte
	fail int
	srv  *httptest.Server
}

func newReceiver(t *testing.T, fail int) *receiver {
	rc := &receiver{fail: fail}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, r)
		rc.body = append(rc.body, b)
		n := len(rc.got)
		rc.mu.Unlock()
		if n <= rc.fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.got)
}

func withCallbacks(allow ...string) option {
	return func(c *job.Config, _ *harness) {
		c.Callbacks = config.Callbacks{Attempts: 3, Backoff: 20 * time.Millisecond, Timeout: 2 * time.Second}
		c.CallbackSecrets = map[string]string{"acme": "s3cret"}
		for _, a := range allow {
			c.CallbackPrivate = append(c.CallbackPrivate, netip.MustParsePrefix(a))
		}
	}
}

// waitCallback polls the stored job until its callback is no longer pending.
func waitCallback(t *testing.T, h *harness, id string) *job.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		j, err := h.svc.Get(t.Context(), "acme", id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Callback != nil && j.Callback.State != job.CallbackPending {
			return j
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("callback of %s still pending", id)
	return nil
}

func TestCallbackDeliveredAfterRetries(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 2)
	h := newHarness(t, withCallbacks("127.0.0.0/8"))
	req := call("echo", `{"text":"hi"}`)
	req.CallbackURL = rc.srv.URL + "/done"
	j := h.submit(t, "acme", req)
	h.wait(t, "acme", j.ID)
	got := waitCallback(t, h, j.ID)
	if got.Callback.State != job.CallbackDelivered || len(got.Callback.Attempts) != 3 {
		t.Fatalf("callback %+v, want delivered on the third attempt", got.Callback)
	}
	for i, a := range got.Callback.Attempts {
		want := http.StatusServiceUnavailable
		if i == 2 {
			want = http.StatusNoContent
		}
		if a.Status != want || (i < 2) != (a.Error != "") {
			t.Errorf("attempt %d: %+v, want status %d", i, a, want)
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, r := range rc.got {
		ts, sig := r.Header.Get("X-Sandboxd-Timestamp"), r.Header.Get("X-Sandboxd-Signature")
		if sig != job.WebhookSignature([]byte("s3cret"), ts, rc.body[i]) || r.Header.Get("X-Sandboxd-Event") != "job.finished" {
			t.Errorf("delivery %d: signature %q over timestamp %q does not verify", i, sig, ts)
		}
		var b struct {
			Type string   `json:"type"`
			Job  *job.Job `json:"job"`
		}
		if err := json.Unmarshal(rc.body[i], &b); err != nil || b.Type != "job.finished" || b.Job.ID != j.ID || b.Job.State != job.StateSucceeded {
			t.Errorf("delivery %d body %s (%v)", i, rc.body[i], err)
		}
	}
}

func TestCallbackGivesUp(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 100)
	h := newHarness(t, withCallbacks("127.0.0.1/32"))
	req := call("echo", `{"text":"hi"}`)
	req.CallbackURL = rc.srv.URL
	j := h.submit(t, "acme", req)
	got := waitCallback(t, h, j.ID)
	if got.Callback.State != job.CallbackFailed || len(got.Callback.Attempts) != 3 || rc.count() != 3 {
		t.Fatalf("callback %+v after %d deliveries, want failed after 3", got.Callback, rc.count())
	}
}

// A callback URL is checked like egress: a literal private address, a
// loopback address outside allow_private_cidrs, a non-http scheme,
// credentials or a tenant without a secret are refused at submit, and
// nothing is recorded.
func TestCallbackURLRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withCallbacks("127.0.0.1/32"))
	for _, tc := range []struct{ tenant, url, want string }{
		{"acme", "http://10.1.2.3/hook", "private"},
		{"acme", "http://127.0.0.2:8080/hook", "loopback"},
		{"acme", "http://169.254.169.254/latest", "metadata"},
		{"acme", "http://[::1]:9/", "loopback"},
		{"acme", "http://0.0.0.0:80/", "refused"},
		{"acme", "http://2130706434/", "refused"}, // 127.0.0.2 in decimal
		{"acme", "ftp://example.com/", "scheme"},
		{"acme", "http://user:pw@example.com/", "credentials"},
		{"acme", "/relative", "absolute"},
		{"other", "http://example.com/", "secret"},
	} {
		req := call("echo", `{"text":"hi"}`)
		req.CallbackURL = tc.url
		_, _, err := h.svc.Submit(t.Context(), tc.tenant, req)
		if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want ErrInvalid mentioning %q", tc.tenant, tc.url, err, tc.want)
		}
	}
	if jobs, _, err := h.svc.List(t.Context(), job.AllTenants, job.ListFilter{}); err != nil || len(jobs) != 0 {
		t.Errorf("refused submissions recorded %d jobs (%v)", len(jobs), err)
	}
}

// A name is judged by what it resolves to: "localhost" at submit (as
// loopback); any other name at delivery, where one resolving to loopback
// without allow_private_cidrs is refused once, not retried, and the
// receiver gets nothing.
func TestCallbackRefusedAtDelivery(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 0)
	h := newHarness(t, withCallbacks(), func(c *job.Config, _ *harness) {
		c.CallbackLookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil // a tenant's DNS name pointing inside
		}
	})
	req := call("echo", `{"text":"hi"}`)
	req.CallbackURL = strings.Replace(rc.srv.URL, "127.0.0.1", "localhost", 1)
	if _, _, err := h.svc.Submit(t.Context(), "acme", req); !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("localhost without allow_private_cidrs: %v, want ErrInvalid", err)
	}
	req.CallbackURL = strings.Replace(rc.srv.URL, "127.0.0.1", "hook.example.com", 1)
	j := h.submit(t, "acme", req)
	got := waitCallback(t, h, j.ID)
	if got.Callback.State != job.CallbackFailed || len(got.Callback.Attempts) != 1 ||
		!strings.HasPrefix(got.Callback.Attempts[0].Error, "refused: ") || rc.count() != 0 {
		t.Fatalf("callback %+v, %d deliveries; want one refused attempt and none delivered", got.Callback, rc.count())
	}
}

func TestTimeline(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	j := h.submit(t, "acme", call("echo", `{"text":"hi"}`))
	h.wait(t, "acme", j.ID)
	var tl *job.Timeline
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) { // the finished event is written in a batch
		var err error
		if tl, err = h.svc.Timeline(t.Context(), "acme", j.ID); err != nil {
			t.Fatal(err)
		}
		if n := len(tl.Entries); n > 0 && tl.Entries[n-1].Type == job.EventFinished {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	var types []string
	for _, e := range tl.Entries {
		types = append(types, string(e.Type))
		if e.DurationMS < 0 {
			t.Errorf("entry %+v has a negative duration", e)
		}
	}
	// The fake runner may stream the output or only return it.
	switch got := strings.Join(types, ","); got {
	case "queued,started,finished":
	case "queued,started,output,finished":
		if o := tl.Entries[2]; o.StdoutBytes < len("hi") || o.Chunks < 1 {
			t.Errorf("output entry %+v, want the 2 bytes of stdout at least", o)
		}
	default:
		t.Errorf("timeline %s, want queued,started,[output,]finished", got)
	}
	if tl.QueuedMS == nil || tl.RunMS == nil || tl.TotalMS < *tl.RunMS {
		t.Errorf("phases queued %v run %v total %v", tl.QueuedMS, tl.RunMS, tl.TotalMS)
	}
	if _, err := h.svc.Timeline(t.Context(), "other", j.ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("another tenant's timeline: %v, want ErrNotFound", err)
	}
	if _, err := h.svc.Timeline(t.Context(), job.AllTenants, j.ID); err != nil {
		t.Errorf("the operator's timeline: %v", err)
	}
}

// A callback a stopped process left pending (one failed attempt recorded)
// is delivered by the next process, counting the attempts so far; a
// delivered one is not sent again, and a job running when the process died
// gets its callback once, as lost.
func TestCallbackResumedAfterRestart(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, 0)
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	done := now.Add(-time.Second)
	mk := func(id string, state job.State, cb *job.Callback) {
		j := &job.Job{ID: id, Tenant: "acme", Tool: "echo", CallID: "c_" + id, Args: json.RawMessage(`{"text":"x"}`),
			State: state, CreatedAt: now.Add(-time.Minute), Callback: cb}
		if state.Terminal() {
			j.StartedAt, j.FinishedAt = &done, &done
		}
		if state == job.StateRunning {
			j.StartedAt = &done
		}
		if err := st.Create(t.Context(), j); err != nil {
			t.Fatal(err)
		}
	}
	mk("job_due", job.StateSucceeded, &job.Callback{URL: rc.srv.URL + "/due", State: job.CallbackPending,
		Attempts: []job.CallbackAttempt{{At: done, Status: 503, Error: "the receiver answered 503"}}})
	mk("job_sent", job.StateSucceeded, &job.Callback{URL: rc.srv.URL + "/sent", State: job.CallbackDelivered,
		Attempts: []job.CallbackAttempt{{At: done, Status: 204}}})
	mk("job_running", job.StateRunning, &job.Callback{URL: rc.srv.URL + "/lost", State: job.CallbackPending})
	st.Close()

	h := newHarness(t, withCallbacks("127.0.0.1/32"), inDir(dir))
	for _, id := range []string{"job_due", "job_running"} {
		got := waitCallback(t, h, id)
		if got.Callback.State != job.CallbackDelivered {
			t.Errorf("%s: %+v", id, got.Callback)
		}
	}
	if got := waitCallback(t, h, "job_due"); len(got.Callback.Attempts) != 2 {
		t.Errorf("job_due attempts %+v, want the old failure and the delivery", got.Callback.Attempts)
	}
	time.Sleep(100 * time.Millisecond)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	paths := map[string]int{}
	for _, r := range rc.got {
		paths[r.URL.Path]++
	}
	if paths["/due"] != 1 || paths["/lost"] != 1 || paths["/sent"] != 0 {
		t.Errorf("deliveries by path %v, want /due and /lost once, /sent never", paths)
	}
}
