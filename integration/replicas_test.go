//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

// startReplicas starts n sandboxd replicas on one Postgres database, each
// with its own data dir and replica id (and config, when not empty).
func startReplicas(t *testing.T, dsn string, n int, config ...string) []*server {
	var out []*server
	for i := range n {
		out = append(out, startServerArgs(t, strings.Join(config, ""), "--store", dsn, "--replica-id", fmt.Sprintf("r%d", i+1)))
	}
	return out
}

// submitRaw posts a job without failing the test on a connection error
// (a replica being killed): status 0 then.
func submitRaw(url string, body any) (int, jobView) { return submitKey(url, "", body) }

// submitKey is submitRaw with an API key.
func submitKey(url, key string, body any) (int, jobView) {
	buf, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/jobs", bytes.NewReader(buf))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, jobView{}
	}
	defer resp.Body.Close()
	var j jobView
	_ = json.NewDecoder(resp.Body).Decode(&j)
	return resp.StatusCode, j
}

// runsPerJob counts each job's started events in the store: a job run
// twice (two replicas, or once before and once after a takeover) has two.
func runsPerJob(t *testing.T, dsn string) map[string]int {
	c, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(t.Context(), `SELECT job_id, count(*) FROM job_events WHERE type = 'started' GROUP BY job_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

// Three replicas on one Postgres: jobs submitted round-robin complete
// wherever they are claimed, and a wait on any replica sees them finish.
func TestReplicasRoundRobin(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	rs := startReplicas(t, dsn, 3)
	for i := range 30 {
		r := rs[i%3]
		var j jobView
		resp, data := r.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "calculator",
			"arguments": map[string]any{"expression": fmt.Sprintf("%d*2", i)}}, &j)
		if resp.StatusCode != 200 || j.State != "succeeded" {
			t.Fatalf("job %d on replica %d: %d %s", i, i%3+1, resp.StatusCode, data)
		}
		var got jobView
		if resp, data := rs[(i+1)%3].do("GET", "/v1/jobs/"+j.ID, "", nil, &got); resp.StatusCode != 200 || got.State != "succeeded" {
			t.Fatalf("job %s read on another replica: %d %s", j.ID, resp.StatusCode, data)
		}
	}
}

// A replica kill -9'd in the middle of 1,000 submissions (16 at a time,
// round-robin) and restarted: every accepted job reaches exactly one
// terminal state, none runs twice: counted from the store's started
// events and, for the http_request calls, by the marker each run leaves
// on the test's own server (one request per run, 300 ms long, so some are
// in flight when the replica dies); one that succeeded left exactly one.
func TestReplicasKill(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	var marksMu sync.Mutex
	marks := map[string]int{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	markSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		marksMu.Lock()
		marks[r.URL.Path]++
		marksMu.Unlock()
		time.Sleep(300 * time.Millisecond)
		fmt.Fprint(w, "marked")
	})}
	go markSrv.Serve(l)
	defer markSrv.Close()
	port := l.Addr().(*net.TCPAddr).Port
	rs := startReplicas(t, dsn, 3, fmt.Sprintf(`
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      egress:
        allow:
          - {host: "127.0.0.1", ports: [%d]}
        allow_private_cidrs: [127.0.0.1/32]
`, port))
	const total, par = 1000, 16
	var (
		mu       sync.Mutex
		accepted []string
		marker   = map[string]string{} // job id -> its marker's path
		refused  = map[int]int{}
	)
	next := make(chan int)
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for i := range next {
				body := map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": fmt.Sprintf("%d+1", i)}}
				path := fmt.Sprintf("/mark/%d", i)
				switch i % 10 {
				case 0: // in a sandbox: some are running when the replica dies
					body = map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 0.3; echo ran"}}
				case 5:
					body = map[string]any{"tool": "http_request", "arguments": map[string]any{"url": fmt.Sprintf("http://127.0.0.1:%d%s", port, path)}}
				}
				code, j := submitKey(rs[i%3].URL, "k-acme", body)
				mu.Lock()
				if code == 200 || code == 201 || code == 202 {
					accepted = append(accepted, j.ID)
					if i%10 == 5 {
						marker[j.ID] = path
					}
				} else {
					refused[code]++
				}
				mu.Unlock()
			}
		})
	}
	for i := range total {
		if i == total/3 {
			rs[1].stop(syscall.SIGKILL)
		}
		if i == total/2 {
			rs[1].start()
		}
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("accepted %d of %d; refused by status: %v", len(accepted), total, refused)
	if len(accepted) < total/2 {
		t.Fatalf("only %d jobs accepted", len(accepted))
	}
	deadline := time.Now().Add(2 * time.Minute)
	marked := 0
	for _, id := range accepted {
		for {
			var j jobView
			resp, data := rs[0].do("GET", "/v1/jobs/"+id, "k-acme", nil, &j)
			if resp.StatusCode != 200 {
				t.Fatalf("job %s: %d %s", id, resp.StatusCode, data)
			}
			if j.State == "succeeded" || j.State == "failed" || j.State == "cancelled" {
				if j.State == "failed" && j.Reason != "lost" {
					t.Errorf("job %s failed: %s", id, data)
				}
				if path, ok := marker[id]; ok {
					marksMu.Lock()
					n := marks[path]
					marksMu.Unlock()
					if n > 1 || (j.State == "succeeded" && n != 1) {
						t.Errorf("http_request job %s (%s) left %d markers", id, j.State, n)
					}
					marked += n
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still %s", id, j.State)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("%d http_request jobs accepted, %d markers left", len(marker), marked)
	if len(marker) == 0 || marked == 0 {
		t.Fatal("no http_request job ran: the markers count nothing")
	}
	runs := runsPerJob(t, dsn)
	for _, id := range accepted {
		if runs[id] > 1 {
			t.Errorf("job %s ran %d times", id, runs[id])
		}
	}
	// No sandbox left behind: once the replicas stop (their warm pools
	// go with them), the local runner's state dirs of every replica, the
	// killed one's reaped at its restart, are empty.
	for i, r := range rs {
		r.stop(syscall.SIGTERM)
		deadline := time.Now().Add(30 * time.Second)
		for {
			left, _ := os.ReadDir(filepath.Join(r.DataDir, "run"))
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				var names []string
				for _, e := range left {
					names = append(names, e.Name())
				}
				t.Fatalf("replica %d left %d sandboxes: %v", i+1, len(left), names)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// The database stopped and restarted under load: submits meanwhile are
// clear 503s; after it is back every replica serves again.
func TestReplicasDatabaseRestart(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	rs := startReplicas(t, dsn, 3)
	for i := range 20 {
		if code, _ := submitRaw(rs[i%3].URL, map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "1+1"}}); code != 202 && code != 201 && code != 200 {
			t.Fatalf("submit before the outage: %d", code)
		}
	}
	pg.Stop()
	for i := range 6 {
		code, _ := submitRaw(rs[i%3].URL, map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "1+1"}})
		if code != 503 {
			t.Fatalf("submit during the outage to replica %d: %d, want 503", i%3+1, code)
		}
	}
	pg.Restart(t)
	for i, r := range rs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var j jobView
			resp, _ := r.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "2+3"}}, &j)
			if resp.StatusCode == 200 && j.State == "succeeded" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %d after the outage: %d %+v", i+1, resp.StatusCode, j)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Nothing stays unfinished.
	c, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := c.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE state IN ('queued', 'running')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs unfinished after the outage", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A session on a replica: its jobs run on that replica (they are never
// claimed by another), fenced under its lease; the session closes there.
func TestReplicasSessionOnOwner(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	rs := startReplicas(t, dsn, 2)
	var sess struct {
		ID    string `json:"id"`
		State string `json:"state"`
	}
	if resp, data := rs[0].do("POST", "/v1/sessions", "", map[string]any{"ttl_seconds": 600}, &sess); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	for i := range 5 {
		var j jobView
		resp, data := rs[0].do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "bash",
			"arguments": map[string]any{"command": fmt.Sprintf("echo %d >> n; wc -l < n", i)}, "session_id": sess.ID}, &j)
		if resp.StatusCode != 200 || j.State != "succeeded" {
			t.Fatalf("session job %d: %d %s", i, resp.StatusCode, data)
		}
	}
	if resp, data := rs[0].do("DELETE", "/v1/sessions/"+sess.ID, "", nil, nil); resp.StatusCode/100 != 2 {
		t.Fatalf("close session: %d %s", resp.StatusCode, data)
	}
	if resp, _ := rs[1].do("GET", "/v1/sessions/"+sess.ID, "", nil, &sess); resp.StatusCode != 200 || sess.State != "closed" {
		t.Fatalf("session read on the other replica: %d %+v", resp.StatusCode, sess)
	}
}

// A replica kill -9'd and not restarted: once its lease (2 s here)
// expires another replica takes it over: the jobs it was running end
// failed/lost, the ones it had claimed but not started run elsewhere,
// and new submits keep being served by the others.
func TestReplicasTakeover(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	var rs []*server
	for i := range 3 {
		rs = append(rs, startServerArgs(t, "queue:\n  workers: 2\n", "--store", dsn, "--replica-id", fmt.Sprintf("r%d", i+1), "--replica-lease", "2s"))
	}
	// Long jobs fill every worker; those that land on r2 die with it.
	var ids []string
	for i := range 9 {
		code, j := submitRaw(rs[i%3].URL, map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 3; echo ran"}})
		if code/100 != 2 {
			t.Fatalf("submit %d: %d", i, code)
		}
		ids = append(ids, j.ID)
	}
	time.Sleep(time.Second) // claimed and running
	rs[1].stop(syscall.SIGKILL)
	states := map[string]int{}
	deadline := time.Now().Add(time.Minute)
	for _, id := range ids {
		for {
			var j jobView
			resp, data := rs[0].do("GET", "/v1/jobs/"+id, "", nil, &j)
			if resp.StatusCode != 200 {
				t.Fatalf("job %s: %d %s", id, resp.StatusCode, data)
			}
			if j.State == "succeeded" || j.State == "failed" {
				states[j.State+"/"+j.Reason]++
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still %s after the takeover", id, j.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("outcomes: %v", states)
	if states["failed/lost"] == 0 || states["succeeded/"] == 0 || states["failed/lost"]+states["succeeded/"] != len(ids) {
		t.Fatalf("outcomes %v: want some lost (r2's running jobs), the rest succeeded", states)
	}
	runs := runsPerJob(t, dsn)
	for _, id := range ids {
		if runs[id] > 1 {
			t.Errorf("job %s ran %d times", id, runs[id])
		}
	}
	if !strings.Contains(rs[0].log.String()+rs[2].log.String(), "took over a replica whose lease expired") {
		t.Fatal("no replica logged the takeover")
	}
}

// A replica kill -9'd while it retries a finished job's callback: the
// replica that takes it over delivers it, continuing the attempts the
// dead one recorded (the receiver sees each attempt once).
func TestReplicasCallbackResumed(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	rc := newHookReceiver(t)
	const cfg = `
callbacks:
  secret: secret-of-the-test-0123456789abcdef
  allow_private_cidrs: [127.0.0.1/32]
  attempts: 10
  backoff: 1500ms
  timeout: 5s
`
	r1 := startServerArgs(t, cfg, "--store", dsn, "--replica-id", "r1", "--replica-lease", "2s")
	path := "/flaky/3" // three 503s, then 204
	var j jobView
	resp, data := r1.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "calculator",
		"arguments": map[string]any{"expression": "6*7"}, "callback_url": rc.srv.URL + path}, &j)
	if resp.StatusCode != 200 || j.State != "succeeded" {
		t.Fatalf("submit: %d %s", resp.StatusCode, data)
	}
	for deadline := time.Now().Add(10 * time.Second); len(rc.deliveries(path)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no callback attempt from r1")
		}
	}
	r2 := startServerArgs(t, cfg, "--store", dsn, "--replica-id", "r2", "--replica-lease", "2s")
	r1.stop(syscall.SIGKILL) // in its backoff before the second attempt
	before := len(rc.deliveries(path))
	cb, data := waitCallback(t, r2, "", j.ID)
	got := rc.deliveries(path)
	t.Logf("r1 made %d attempts; %d in all: %+v", before, len(got), cb.Attempts)
	if cb.State != "delivered" || len(got) != 4 || len(cb.Attempts) != 4 || cb.Attempts[3].Status != 204 {
		t.Fatalf("callback %s, %d deliveries: want delivered at the 4th attempt, each attempt once", data, len(got))
	}
	for i, d := range got {
		if d.event != "job.finished" || !strings.Contains(string(d.body), j.ID) {
			t.Errorf("delivery %d: event %q body %s", i, d.event, d.body)
		}
	}
}
