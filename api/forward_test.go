package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner/fake"
	"github.com/sandboxd/sandboxd/store"
)

const testSecret = "0123456789abcdef0123456789abcdef"

// fakeCluster is one replica's view: every session and job not held here
// is owner's.
type fakeCluster struct {
	self  string
	svc   *job.Service
	owner atomic.Pointer[job.Lease]
	reg   *prometheus.Registry
}

// forwards is the replica's sandboxd_replica_forwards_total{result}.
func (c *fakeCluster) forwards(result string) float64 {
	mfs, _ := c.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sandboxd_replica_forwards_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func (c *fakeCluster) Self() string                { return c.self }
func (c *fakeCluster) HoldsSession(id string) bool { return c.svc.HoldsSession(id) }
func (c *fakeCluster) HoldsJob(id string) bool     { return c.svc.HoldsJob(id) }
func (c *fakeCluster) SessionOwner(ctx context.Context, id string) (job.Lease, error) {
	if l := c.owner.Load(); l != nil {
		return *l, nil
	}
	return job.Lease{}, job.ErrSessionNotFound
}
func (c *fakeCluster) JobOwner(ctx context.Context, id string) (job.Lease, error) {
	if l := c.owner.Load(); l != nil {
		return *l, nil
	}
	return job.Lease{}, job.ErrNotFound
}
func (c *fakeCluster) Replicas(ctx context.Context) ([]job.Lease, error) {
	if l := c.owner.Load(); l != nil {
		return []job.Lease{*l}, nil
	}
	return nil, nil
}

// replicaPair is two API servers over two job services, b forwarding to
// a what a holds.
func replicaPair(t testing.TB) (a, b *httptest.Server, ca, cb *fakeCluster) {
	t.Helper()
	mk := func(name string) (*httptest.Server, *fakeCluster) {
		dir := t.TempDir()
		st, err := store.Open(filepath.Join(dir, "db"))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := job.New(job.Config{WorkDir: filepath.Join(dir, "work"), Sessions: config.Sessions{MaxPerTenant: 4}}, st, testRegistry(t), fake.New())
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		c := &fakeCluster{self: name, svc: svc, reg: prometheus.NewRegistry()}
		srv := httptest.NewServer(New(svc, Options{Keys: map[string]string{"ka": "acme", "kb": "bravo"},
			Cluster: c, ReplicaSecret: testSecret, Registerer: c.reg}))
		t.Cleanup(func() {
			srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = svc.Shutdown(ctx)
			st.Close()
		})
		return srv, c
	}
	a, ca = mk("A")
	b, cb = mk("B")
	u, _ := url.Parse(a.URL)
	cb.owner.Store(&job.Lease{Replica: "A", Epoch: 1, Address: u.Host, Expires: time.Now().Add(time.Minute)})
	return a, b, ca, cb
}

func call(t *testing.T, method, url, key, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp, data
}

// A session created on A is used through B: files, a session job with
// ?wait, its events, close; B forwards with the caller's tenant, and
// another tenant's key gets A's 404.
func TestForwardSessionToOwner(t *testing.T) {
	a, b, ca, cb := replicaPair(t)
	resp, data := call(t, "POST", a.URL+"/v1/sessions", "ka", `{}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create on A: %d %s", resp.StatusCode, data)
	}
	var sess struct{ ID, State string }
	_ = json.Unmarshal(data, &sess)

	if resp, data := call(t, "PUT", b.URL+"/v1/sessions/"+sess.ID+"/files/in.txt", "ka", "hello via B"); resp.StatusCode != 200 {
		t.Fatalf("put through B: %d %s", resp.StatusCode, data)
	}
	if resp, data := call(t, "GET", a.URL+"/v1/sessions/"+sess.ID+"/files/in.txt", "ka", ""); resp.StatusCode != 200 || string(data) != "hello via B" {
		t.Fatalf("read on A: %d %q", resp.StatusCode, data)
	}
	if resp, data := call(t, "GET", b.URL+"/v1/sessions/"+sess.ID+"/files/in.txt", "ka", ""); resp.StatusCode != 200 || string(data) != "hello via B" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("read through B: %d %q %v", resp.StatusCode, data, resp.Header)
	}
	if resp, data := call(t, "GET", b.URL+"/v1/sessions/"+sess.ID+"/files/in.txt", "kb", ""); resp.StatusCode != 404 {
		t.Fatalf("another tenant through B: %d %s, want 404", resp.StatusCode, data)
	}
	resp, data = call(t, "POST", b.URL+"/v1/jobs?wait=true", "ka", `{"tool":"echo","arguments":{"text":"hi"},"session_id":"`+sess.ID+`"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("session job through B: %d %s", resp.StatusCode, data)
	}
	var j struct{ ID, State string }
	_ = json.Unmarshal(data, &j)
	if j.State != "succeeded" {
		t.Fatalf("session job: %s", data)
	}
	if resp, data := call(t, "GET", b.URL+"/v1/jobs/"+j.ID+"/events", "ka", ""); resp.StatusCode != 200 || !strings.Contains(string(data), "event: finished") {
		t.Fatalf("events through B: %d %s", resp.StatusCode, data)
	}
	if resp, data := call(t, "DELETE", b.URL+"/v1/sessions/"+sess.ID, "ka", ""); resp.StatusCode != 200 || !strings.Contains(string(data), `"closed"`) {
		t.Fatalf("close through B: %d %s", resp.StatusCode, data)
	}
	if sent, got := cb.forwards("sent"), ca.forwards("received"); sent != 6 || got != 6 {
		t.Fatalf("forwards: B sent %v, A received %v, want 6", sent, got)
	}
}

// signedRequest is a forward B would send to A.
func signedRequest(t *testing.T, auth *forwardAuth, method, target, to string, p principal, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	mode := "none"
	if body != "" {
		mode = "trailer"
	}
	sig := auth.sign(req, to, p, mode)
	if body != "" {
		req.Trailer = http.Header{trlForwardBody: nil}
		req.ContentLength = -1
		req.Body = &signedBody{rc: req.Body, trailer: req.Trailer, a: auth, sig: sig, h: sha256.New()}
	}
	return req
}

// The owner refuses forged, replayed, misaddressed, stale and altered
// forwards, and a client's own envelope headers.
func TestForwardRefused(t *testing.T) {
	a, _, ca, _ := replicaPair(t)
	resp, data := call(t, "POST", a.URL+"/v1/sessions", "ka", `{}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var sess struct{ ID string }
	_ = json.Unmarshal(data, &sess)
	path := a.URL + "/v1/sessions/" + sess.ID
	b := newForwardAuth(testSecret, func() string { return "B" })
	acme := principal{tenant: "acme"}
	do := func(req *http.Request) int {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	good := signedRequest(t, b, "GET", path, "A", acme, "")
	if code := do(good); code != 200 {
		t.Fatalf("a good forward: %d", code)
	}
	if code := do(good.Clone(context.Background())); code != 401 {
		t.Fatalf("a replayed forward: %d, want 401", code)
	}
	forged := signedRequest(t, newForwardAuth("another secret of thirty-two bytes", func() string { return "B" }), "GET", path, "A", acme, "")
	if code := do(forged); code != 401 {
		t.Fatalf("a forward signed with another secret: %d, want 401", code)
	}
	elsewhere := signedRequest(t, b, "GET", path, "C", acme, "")
	if code := do(elsewhere); code != 401 {
		t.Fatalf("a forward addressed to another replica: %d, want 401", code)
	}
	swapped := signedRequest(t, b, "GET", path, "A", acme, "")
	swapped.Header.Set(hdrForwardTen, "bravo")
	if code := do(swapped); code != 401 {
		t.Fatalf("a forward with its tenant changed: %d, want 401", code)
	}
	old := newForwardAuth(testSecret, func() string { return "B" })
	old.now = func() time.Time { return time.Now().Add(-2 * forwardWindow) }
	if code := do(signedRequest(t, old, "GET", path, "A", acme, "")); code != 401 {
		t.Fatalf("a stale forward: %d, want 401", code)
	}
	client := signedRequest(t, b, "GET", path, "A", acme, "")
	client.Header.Set(hdrForwardSig, strings.Repeat("0", 64))
	if code := do(client); code != 401 {
		t.Fatalf("a client's own envelope: %d, want 401", code)
	}
	// A body altered after signing: the upload fails at its end and
	// nothing is written.
	put := signedRequest(t, b, "PUT", path+"/files/x.txt", "A", acme, "original")
	orig := sha256.Sum256([]byte("original"))
	put.Body = &tampered{rc: io.NopCloser(strings.NewReader("tampered")), trailer: put.Trailer,
		mac: b.bodyMAC(put.Header.Get(hdrForwardSig), orig[:])}
	if code := do(put); code == 200 {
		t.Fatalf("an altered body: %d, want a refusal", code)
	}
	if resp, _ := call(t, "GET", path+"/files/x.txt", "ka", ""); resp.StatusCode != 404 {
		t.Fatalf("the altered upload was written: %d", resp.StatusCode)
	}
	// A body sent whole whose signed digest is another body's: refused at
	// its end, nothing written.
	whole, _ := http.NewRequest("PUT", path+"/files/w.txt", strings.NewReader("tampered"))
	orig2 := sha256.Sum256([]byte("original"))
	b.sign(whole, "A", acme, "sha256:"+hex.EncodeToString(orig2[:]))
	if code := do(whole); code == 200 {
		t.Fatalf("a whole body altered: %d, want a refusal", code)
	}
	if resp, _ := call(t, "GET", path+"/files/w.txt", "ka", ""); resp.StatusCode != 404 {
		t.Fatalf("the altered whole upload was written: %d", resp.StatusCode)
	}
	// A body the signature says is not there is refused.
	nobody := signedRequest(t, b, "PUT", path+"/files/z.txt", "A", acme, "")
	nobody.Body, nobody.ContentLength = io.NopCloser(strings.NewReader("smuggled")), -1
	if code := do(nobody); code != 401 {
		t.Fatalf("a body its signature does not cover: %d, want 401", code)
	}
	// A good forward with a body is accepted.
	if code := do(signedRequest(t, b, "PUT", path+"/files/y.txt", "A", acme, "fine")); code != 200 {
		t.Fatalf("a good forward with a body: %d", code)
	}
	if n := ca.forwards("refused"); n != 7 {
		t.Fatalf("refused forwards counted: %v, want 7", n)
	}
}

// The owner gone: a forward that cannot connect answers 503 with
// Retry-After (not a 502), and forgets the owner.
func TestForwardOwnerUnreachable(t *testing.T) {
	a, b, _, _ := replicaPair(t)
	resp, data := call(t, "POST", a.URL+"/v1/sessions", "ka", `{}`)
	if resp.StatusCode != 201 {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var sess struct{ ID string }
	_ = json.Unmarshal(data, &sess)
	a.Close()
	resp, data = call(t, "GET", b.URL+"/v1/sessions/"+sess.ID+"/files", "ka", "")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(data), CodeReplicaUnavailable) {
		t.Fatalf("owner unreachable: %d %s", resp.StatusCode, data)
	}
}

// Fuzz the envelope check: no input panics, and nothing unsigned is
// accepted.
func FuzzForwardVerify(f *testing.F) {
	f.Add("GET", "/v1/sessions/x", "v1", "B", "A", "1700000000000000000", strings.Repeat("a", 32), "acme", "0", "none", strings.Repeat("0", 64))
	f.Add("PUT", "/v1/x?y=1", "v1", "", "", "", "", "", "1", "trailer", "")
	auth := newForwardAuth(testSecret, func() string { return "A" })
	f.Fuzz(func(t *testing.T, method, uri, ver, from, to, ts, nonce, tenant, op, mode, sig string) {
		r := &http.Request{Method: method, RequestURI: uri, Header: http.Header{}, Body: http.NoBody}
		for k, v := range map[string]string{hdrForward: ver, hdrForwardFrom: from, hdrForwardTo: to, hdrForwardTime: ts,
			hdrForwardNon: nonce, hdrForwardTen: tenant, hdrForwardOp: op, hdrForwardBody: mode, hdrForwardSig: sig} {
			r.Header.Set(k, v)
		}
		if _, err := auth.verify(r); !errors.Is(err, errForgedForward) {
			t.Fatalf("an unsigned envelope was accepted: %v", err)
		}
	})
}

// tampered sends another body than the one its trailer's MAC covers.
type tampered struct {
	rc      io.ReadCloser
	trailer http.Header
	mac     string
}

func (t *tampered) Read(p []byte) (int, error) {
	n, err := t.rc.Read(p)
	if err == io.EOF {
		t.trailer.Set(trlForwardBody, t.mac)
	}
	return n, err
}

func (t *tampered) Close() error { return t.rc.Close() }

// BenchmarkForwardOverhead: GET /v1/sessions/{id} of a session on A,
// direct and through B, interleaved in one run; reports each one's p50
// and the forward's added p50 (in-process servers on loopback: the
// forwarder's own cost, without a sandbox).
func BenchmarkForwardOverhead(b *testing.B) {
	a, bb, _, _ := replicaPair(b)
	req, _ := http.NewRequest("POST", a.URL+"/v1/sessions", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer ka")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var sess struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	get := func(base string) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("GET", base+"/v1/sessions/"+sess.ID, nil)
		req.Header.Set("Authorization", "Bearer ka")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%d", resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 20 {
		get(a.URL)
		get(bb.URL)
	}
	var direct, fwd []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			direct = append(direct, get(a.URL))
			fwd = append(fwd, get(bb.URL))
		} else {
			fwd = append(fwd, get(bb.URL))
			direct = append(direct, get(a.URL))
		}
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(direct), "direct-p50-ms")
	b.ReportMetric(p50(fwd), "forwarded-p50-ms")
	b.ReportMetric(p50(fwd)-p50(direct), "forward-added-p50-ms")
}

func TestMCPOwner(t *testing.T) {
	for _, id := range []string{"r1", "host:8080", "a.b.c", ""} {
		if got := mcpOwner(MCPSessionPrefix(id) + "RANDOMTEXT"); got != id {
			t.Errorf("mcpOwner(MCPSessionPrefix(%q)+...) = %q", id, got)
		}
	}
	for _, sid := range []string{"", "noseparator", "!!!.x", strings.Repeat("a", 600) + ".x"} {
		if got := mcpOwner(sid); got != "" {
			t.Errorf("mcpOwner(%q) = %q, want none", sid, got)
		}
	}
}

// BenchmarkForwardPost: a session job (the in-process echo tool) submitted
// with ?wait=true on A and through B, interleaved: the forward of a
// buffered body (its digest signed with the headers).
func BenchmarkForwardPost(b *testing.B) {
	a, bb, _, _ := replicaPair(b)
	req, _ := http.NewRequest("POST", a.URL+"/v1/sessions", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer ka")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	var sess struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&sess)
	resp.Body.Close()
	body := `{"tool":"echo","arguments":{"text":"hi"},"session_id":"` + sess.ID + `"}`
	post := func(base string) time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("POST", base+"/v1/jobs?wait=true", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer ka")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%d", resp.StatusCode)
		}
		return time.Since(start)
	}
	for range 20 {
		post(a.URL)
		post(bb.URL)
	}
	var direct, fwd []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		direct = append(direct, post(a.URL))
		fwd = append(fwd, post(bb.URL))
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(direct), "direct-p50-ms")
	b.ReportMetric(p50(fwd)-p50(direct), "forward-added-p50-ms")
}
