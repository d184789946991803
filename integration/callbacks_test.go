//go:build integration

package integration

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// hookReceiver is the test's own loopback receiver of completion
// callbacks. Paths under /flaky/N answer 503 to their first N deliveries;
// /down always answers 500; anything else 204.
type hookReceiver struct {
	mu   sync.Mutex
	got  map[string][]delivery
	srv  *httptest.Server
	host string // 127.0.0.1:PORT
}

type delivery struct {
	at              time.Time
	event, ts, sig  string
	body            []byte
	status          int
	contentType, ua string
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{got: map[string][]delivery{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		n := len(h.got[r.URL.Path])
		status := http.StatusNoContent
		switch {
		case r.URL.Path == "/down":
			status = http.StatusInternalServerError
		case strings.HasPrefix(r.URL.Path, "/flaky/"):
			if fail, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/flaky/")); n < fail {
				status = http.StatusServiceUnavailable
			}
		}
		h.got[r.URL.Path] = append(h.got[r.URL.Path], delivery{at: time.Now(), event: r.Header.Get("X-Sandboxd-Event"),
			ts: r.Header.Get("X-Sandboxd-Timestamp"), sig: r.Header.Get("X-Sandboxd-Signature"), body: body, status: status,
			contentType: r.Header.Get("Content-Type"), ua: r.Header.Get("User-Agent")})
		w.WriteHeader(status)
	}))
	t.Cleanup(h.srv.Close)
	h.host = strings.TrimPrefix(h.srv.URL, "http://")
	return h
}

func (h *hookReceiver) deliveries(path string) []delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]delivery(nil), h.got[path]...)
}

func (h *hookReceiver) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, d := range h.got {
		n += len(d)
	}
	return n
}

// verify checks a delivery's signature as a receiver must: HMAC-SHA256 of
// timestamp "." body under the secret, compared in constant time, and a
// fresh timestamp.
func (d delivery) verify(secret string) error {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(d.ts + "." + string(d.body)))
	want := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(d.sig)) {
		return fmt.Errorf("signature %q, want %q", d.sig, want)
	}
	ts, err := strconv.ParseInt(d.ts, 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > time.Minute {
		return fmt.Errorf("timestamp %q is not a current Unix time", d.ts)
	}
	return nil
}

type callbackView struct {
	URL      string `json:"url"`
	State    string `json:"state"`
	Attempts []struct {
		At         time.Time `json:"at"`
		DurationMS int64     `json:"duration_ms"`
		Status     int       `json:"status"`
		Error      string    `json:"error"`
	} `json:"attempts"`
}

// waitCallback polls GET /v1/jobs/{id} until its callback leaves pending.
func waitCallback(t *testing.T, s *server, key, id string) (callbackView, []byte) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var j struct {
			Callback *callbackView `json:"callback"`
		}
		resp, data := s.do("GET", "/v1/jobs/"+id, key, nil, &j)
		if resp.StatusCode != 200 || j.Callback == nil {
			t.Fatalf("GET job %s: %d %s", id, resp.StatusCode, data)
		}
		if j.Callback.State != "pending" {
			return *j.Callback, data
		}
		if time.Now().After(deadline) {
			t.Fatalf("callback of %s still pending: %s", id, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCallbacks: a job with a callback_url is POSTed its final record when
// it ends, signed with the tenant's secret; a receiver that fails is
// retried with backoff and the attempts show on the job; a receiver that
// never answers 2xx is given up after callbacks.attempts; URLs aimed at
// private networks, at loopback outside callbacks.allow_private_cidrs and
// at sandboxd itself are refused with 400 and nothing runs; a name that
// resolves to a refused address is refused at delivery, once.
func TestCallbacks(t *testing.T) {
	rc := newHookReceiver(t)
	s := startServer(t, `
tenants:
  - name: alice
    api_keys: [key-alice]
    callback_secret: secret-alice
  - name: bob
    api_keys: [key-bob]
operator_keys: [key-op]
callbacks:
  allow_private_cidrs: [127.0.0.1/32]
  attempts: 3
  backoff: 300ms
  timeout: 5s
`)
	submit := func(key string, body map[string]any) (int, jobView, []byte) {
		t.Helper()
		var j jobView
		resp, data := s.do("POST", "/v1/jobs?wait=true", key, body, &j)
		return resp.StatusCode, j, data
	}
	calc := func(url string) map[string]any {
		return map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "6*7"}, "callback_url": url}
	}

	t.Run("Delivered", func(t *testing.T) {
		code, j, data := submit("key-alice", calc(rc.srv.URL+"/ok"))
		if code != 200 || j.State != "succeeded" {
			t.Fatalf("submit: %d %s", code, data)
		}
		cb, _ := waitCallback(t, s, "key-alice", j.ID)
		if cb.State != "delivered" || len(cb.Attempts) != 1 || cb.Attempts[0].Status != 204 || cb.Attempts[0].Error != "" {
			t.Fatalf("callback %+v, want delivered at the first attempt", cb)
		}
		ds := rc.deliveries("/ok")
		if len(ds) != 1 {
			t.Fatalf("%d deliveries", len(ds))
		}
		d := ds[0]
		if err := d.verify("secret-alice"); err != nil {
			t.Error(err)
		}
		if err := d.verify("secret-bob"); err == nil {
			t.Error("the signature verifies under another secret")
		}
		if d.event != "job.finished" || d.contentType != "application/json" || d.ua != "sandboxd-callback" {
			t.Errorf("headers: event %q, content type %q, user agent %q", d.event, d.contentType, d.ua)
		}
		// The body is the final record as GET /v1/jobs/{id} shows it (less
		// the callback's own progress, recorded after the delivery).
		var body struct {
			Type string         `json:"type"`
			Job  map[string]any `json:"job"`
		}
		if err := json.Unmarshal(d.body, &body); err != nil || body.Type != "job.finished" {
			t.Fatalf("body %s: %v", d.body, err)
		}
		var now map[string]any
		s.do("GET", "/v1/jobs/"+j.ID, "key-alice", nil, &now)
		delete(body.Job, "callback")
		delete(now, "callback")
		a, _ := json.Marshal(body.Job)
		b, _ := json.Marshal(now)
		if string(a) != string(b) {
			t.Errorf("the callback's job differs from GET /v1/jobs/{id}:\n%s\n%s", a, b)
		}
	})

	t.Run("RetriedAfterFailures", func(t *testing.T) {
		code, j, data := submit("key-alice", calc(rc.srv.URL+"/flaky/2"))
		if code != 200 {
			t.Fatalf("submit: %d %s", code, data)
		}
		cb, _ := waitCallback(t, s, "key-alice", j.ID)
		if cb.State != "delivered" || len(cb.Attempts) != 3 {
			t.Fatalf("callback %+v, want delivered at the third attempt", cb)
		}
		for i, want := range []int{503, 503, 204} {
			if a := cb.Attempts[i]; a.Status != want || (want != 204) != (a.Error != "") {
				t.Errorf("attempt %d: %+v, want status %d", i, a, want)
			}
		}
		ds := rc.deliveries("/flaky/2")
		if len(ds) != 3 {
			t.Fatalf("%d deliveries, want 3", len(ds))
		}
		for i, d := range ds {
			if err := d.verify("secret-alice"); err != nil {
				t.Errorf("delivery %d: %v", i, err)
			}
			if string(d.body) != string(ds[0].body) {
				t.Errorf("delivery %d's body differs from the first", i)
			}
		}
		// Backoff: 300 ms, then 600 ms.
		if g1, g2 := ds[1].at.Sub(ds[0].at), ds[2].at.Sub(ds[1].at); g1 < 250*time.Millisecond || g2 < 550*time.Millisecond {
			t.Errorf("retry gaps %v and %v, want about 300 ms and 600 ms", g1, g2)
		}
	})

	t.Run("GivenUp", func(t *testing.T) {
		_, j, _ := submit("key-alice", calc(rc.srv.URL+"/down"))
		cb, _ := waitCallback(t, s, "key-alice", j.ID)
		if cb.State != "failed" || len(cb.Attempts) != 3 || len(rc.deliveries("/down")) != 3 {
			t.Fatalf("callback %+v, %d deliveries; want failed after 3", cb, len(rc.deliveries("/down")))
		}
	})

	// A model turn (POST /v1/tool-calls) with a callback_url: the batch
	// as GET /v1/tool-calls/{id} answers it, once every call is answered.
	t.Run("Turn", func(t *testing.T) {
		turn := func(url string) map[string]any {
			return map[string]any{"role": "assistant", "callback_url": url, "tool_calls": []any{
				map[string]any{"id": "call_a", "type": "function", "function": map[string]any{"name": "calculator", "arguments": `{"expression":"6*7"}`}},
				map[string]any{"id": "call_b", "type": "function", "function": map[string]any{"name": "calculator", "arguments": `{"expression":"1+1"}`}},
			}}
		}
		var b struct {
			ID       string        `json:"id"`
			State    string        `json:"state"`
			Callback *callbackView `json:"callback"`
		}
		resp, data := s.do("POST", "/v1/tool-calls", "key-alice", turn(rc.srv.URL+"/turn"), &b)
		if resp.StatusCode != 200 || b.State != "completed" {
			t.Fatalf("turn: %d %s", resp.StatusCode, data)
		}
		deadline := time.Now().Add(20 * time.Second)
		for b.Callback == nil || b.Callback.State == "pending" {
			if time.Now().After(deadline) {
				t.Fatalf("turn callback still pending: %s", data)
			}
			time.Sleep(50 * time.Millisecond)
			resp, data = s.do("GET", "/v1/tool-calls/"+b.ID, "key-alice", nil, &b)
			if resp.StatusCode != 200 {
				t.Fatalf("GET turn: %d %s", resp.StatusCode, data)
			}
		}
		if b.Callback.State != "delivered" || len(b.Callback.Attempts) != 1 || b.Callback.Attempts[0].Status != 204 {
			t.Fatalf("turn callback %+v", b.Callback)
		}
		ds := rc.deliveries("/turn")
		if len(ds) != 1 || ds[0].event != "turn.finished" {
			t.Fatalf("turn deliveries %+v", ds)
		}
		if err := ds[0].verify("secret-alice"); err != nil {
			t.Error(err)
		}
		var body struct {
			Type  string `json:"type"`
			Batch struct {
				ID       string `json:"id"`
				State    string `json:"state"`
				Messages []struct {
					Role       string `json:"role"`
					ToolCallID string `json:"tool_call_id"`
					Content    string `json:"content"`
				} `json:"messages"`
			} `json:"batch"`
		}
		if err := json.Unmarshal(ds[0].body, &body); err != nil || body.Type != "turn.finished" || body.Batch.ID != b.ID ||
			body.Batch.State != "completed" || len(body.Batch.Messages) != 2 || strings.TrimSpace(body.Batch.Messages[0].Content) != "42" {
			t.Errorf("turn callback body %s (%v)", ds[0].body, err)
		}
		if resp, data := s.do("POST", "/v1/tool-calls", "key-alice", turn("http://10.0.0.1/x"), nil); resp.StatusCode != 400 {
			t.Errorf("a turn aimed at a private address: %d %s, want 400", resp.StatusCode, data)
		}
	})

	t.Run("RefusedTargets", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(rc.host)
		before := rc.total()
		api := strings.TrimPrefix(s.URL, "http://")
		for _, tc := range []struct{ key, url, why string }{
			{"key-alice", "http://10.0.0.1:" + port + "/x", "private network"},
			{"key-alice", "http://192.168.1.1/x", "private network"},
			{"key-alice", "http://127.0.0.2:" + port + "/x", "loopback outside allow_private_cidrs"},
			{"key-alice", "http://[::1]:" + port + "/x", "IPv6 loopback"},
			{"key-alice", "http://169.254.169.254/latest/meta-data", "metadata"},
			{"key-alice", "http://0.0.0.0:" + port + "/x", "this host"},
			{"key-alice", "http://" + api + "/v1/jobs", "sandboxd's own API"},
			{"key-alice", "file:///etc/passwd", "scheme"},
			{"key-bob", rc.srv.URL + "/ok", "a tenant without a callback secret"},
		} {
			code, _, data := submit(tc.key, calc(tc.url))
			if code != 400 || !strings.Contains(string(data), "callback") {
				t.Errorf("%s (%s): %d %s, want 400", tc.url, tc.why, code, data)
			}
		}
		var l struct {
			Jobs []jobView `json:"jobs"`
		}
		s.do("GET", "/v1/jobs?tenant=bob", "key-op", nil, &l)
		if len(l.Jobs) != 0 {
			t.Errorf("refused submissions recorded jobs: %+v", l.Jobs)
		}
		if rc.total() != before {
			t.Errorf("the receiver got %d deliveries from refused URLs", rc.total()-before)
		}
	})

	// A name is judged at delivery by what it resolves to: this host's
	// name resolves to loopback, which a server without
	// allow_private_cidrs refuses (and "localhost" already at submit).
	t.Run("RefusedAtDelivery", func(t *testing.T) {
		host, _ := os.Hostname()
		addrs, err := net.LookupHost(host)
		if err != nil || len(addrs) == 0 {
			t.Skipf("this host's name %q does not resolve (%v)", host, err)
		}
		for _, a := range addrs {
			if ip := net.ParseIP(a); ip == nil || !(ip.IsLoopback() || ip.IsPrivate()) {
				t.Skipf("this host's name %q resolves to %v, not only loopback or private addresses", host, addrs)
			}
		}
		s2 := startServer(t, `
tenants:
  - name: alice
    api_keys: [key-alice]
    callback_secret: secret-alice
callbacks:
  attempts: 3
  backoff: 100ms
`)
		_, port, _ := net.SplitHostPort(rc.host)
		var j jobView
		if resp, data := s2.do("POST", "/v1/jobs?wait=true", "key-alice", calc("http://localhost:"+port+"/ok"), &j); resp.StatusCode != 400 {
			t.Errorf("localhost without allow_private_cidrs: %d %s, want 400", resp.StatusCode, data)
		}
		before := len(rc.deliveries("/named"))
		resp, data := s2.do("POST", "/v1/jobs?wait=true", "key-alice", calc("http://"+host+":"+port+"/named"), &j)
		if resp.StatusCode != 200 {
			t.Fatalf("submit with %s: %d %s", host, resp.StatusCode, data)
		}
		cb, _ := waitCallback(t, s2, "key-alice", j.ID)
		if cb.State != "failed" || len(cb.Attempts) != 1 || !strings.HasPrefix(cb.Attempts[0].Error, "refused: ") {
			t.Errorf("callback to %s (%v): %+v, want one refused attempt", host, addrs, cb)
		}
		if n := len(rc.deliveries("/named")) - before; n != 0 {
			t.Errorf("the receiver got %d deliveries through %s", n, host)
		}
	})
}
