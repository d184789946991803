//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

const replicasGuardConfig = `
tenants:
  - name: acme
    api_keys: [k-acme]
    policy:
      budgets:
        - effect: exec
          limit: 10
          per: 1h
  - name: ratey
    api_keys: [k-ratey]
    policy:
      rate_limit:
        rate: 0.001
        burst: 10
`

// postJob posts a job with key, safe from any goroutine (no t.Fatal):
// the status (0 on a transport error), the job and the raw body.
func postJob(url, key string, body any) (int, guardJob, string) {
	buf, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/jobs", bytes.NewReader(buf))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, guardJob{}, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var j guardJob
	_ = json.Unmarshal(data, &j)
	return resp.StatusCode, j, string(data)
}

// The guard is exact across replicas on Postgres: 200 parallel calls,
// spread over three replicas, race for a budget of 10 exec calls and for
// a rate limit's burst of 10: exactly 10 of each pass, the other 190 are
// refused by the guard (200, failed with budget_exhausted/rate_limited and
// the guard's reason), and the store's counters say 10.
func TestReplicasGuardExact(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	var rs []*server
	for i := range 3 {
		rs = append(rs, startServerArgs(t, replicasGuardConfig, "--store", dsn, "--replica-id", fmt.Sprintf("r%d", i+1)))
	}
	race := func(key string, body func(i int) any, reason string) []string {
		var (
			mu       sync.Mutex
			accepted []string
			refused  int
			wg       sync.WaitGroup
		)
		for i := range 200 {
			wg.Go(func() {
				code, j, raw := postJob(rs[i%3].URL, key, body(i))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case code == 202 && (j.State == "queued" || j.State == "running"),
					code == 200 && j.State == "succeeded":
					accepted = append(accepted, j.ID)
				case code == 200 && j.State == "failed" && j.Reason == reason:
					refused++
					if j.Guard == nil || j.Guard.Outcome != "deny" || j.Guard.Code != reason || j.Result == nil || j.Result.OK ||
						!strings.HasPrefix(j.Result.Error, "refused by policy: ") {
						t.Errorf("refusal on replica %d: %s", i%3+1, raw)
					}
				default:
					t.Errorf("call %d on replica %d: %d %s", i, i%3+1, code, raw)
				}
			})
		}
		wg.Wait()
		if len(accepted) != 10 || refused != 190 {
			t.Fatalf("%s: accepted %d, refused %d; want exactly 10 and 190", key, len(accepted), refused)
		}
		return accepted
	}

	// A budget of 10 exec calls per hour.
	accepted := race("k-acme", func(i int) any {
		return map[string]any{"tool": "bash", "arguments": map[string]any{"command": fmt.Sprintf("echo %d", i)}}
	}, "budget_exhausted")
	for i, id := range accepted { // they run, on whichever replica claimed them
		var j guardJob
		if resp, data := rs[i%3].do("GET", "/v1/jobs/"+id+"?wait=60s", "k-acme", nil, &j); resp.StatusCode != 200 || j.State != "succeeded" {
			t.Fatalf("accepted job %s: %d %s", id, resp.StatusCode, data)
		}
	}
	// A rate limit's burst of 10 (a token every 1,000 s).
	race("k-ratey", func(i int) any {
		return map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": fmt.Sprintf("%d+1", i)}}
	}, "rate_limited")

	c, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var used, lim int64
	if err := c.QueryRow(t.Context(), `SELECT used, lim FROM guard_counters WHERE tenant = 'acme'`).Scan(&used, &lim); err != nil || used != 10 || lim != 10 {
		t.Fatalf("acme's counter: used %d of %d (%v), want 10 of 10", used, lim, err)
	}
	var tokens float64
	if err := c.QueryRow(t.Context(), `SELECT tokens FROM guard_rates WHERE tenant = 'ratey'`).Scan(&tokens); err != nil || tokens >= 1 {
		t.Fatalf("ratey's bucket: %v tokens (%v), want less than 1", tokens, err)
	}
	for _, w := range []struct {
		tenant, reason string
		n              int
	}{{"acme", "", 10}, {"acme", "budget_exhausted", 190}, {"ratey", "", 10}, {"ratey", "rate_limited", 190}} {
		var n int
		if err := c.QueryRow(t.Context(), `SELECT count(*) FROM jobs WHERE tenant = $1 AND reason = $2`, w.tenant, w.reason).Scan(&n); err != nil || n != w.n {
			t.Errorf("%s's jobs with reason %q: %d (%v), want %d", w.tenant, w.reason, n, err, w.n)
		}
	}
}

// A tenant's max_running holds across replicas: 12 sandboxed jobs spread
// over three replicas of one worker each, a cap of 2: never more than 2 of
// them run at once (from their started/finished times in the store).
func TestReplicasTenantCap(t *testing.T) {
	pg := pgtest.Start(t)
	dsn := pg.NewDatabase(t)
	// One worker each: three replicas could run three at once.
	const cfg = `
queue:
  workers: 1
tenants:
  - name: acme
    api_keys: [k-acme]
    max_running: 2
`
	var rs []*server
	for i := range 3 {
		rs = append(rs, startServerArgs(t, cfg, "--store", dsn, "--replica-id", fmt.Sprintf("r%d", i+1)))
	}
	var ids []string
	for i := range 12 {
		code, j, raw := postJob(rs[i%3].URL, "k-acme", map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 0.4; echo ran"}})
		if code != 202 {
			t.Fatalf("job %d: %d %s", i, code, raw)
		}
		ids = append(ids, j.ID)
	}
	for i, id := range ids {
		var j guardJob
		if resp, data := rs[(i+1)%3].do("GET", "/v1/jobs/"+id+"?wait=120s", "k-acme", nil, &j); resp.StatusCode != 200 || j.State != "succeeded" {
			t.Fatalf("job %s: %d %s", id, resp.StatusCode, data)
		}
	}
	c, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(t.Context(), `SELECT started_at, finished_at, owner FROM jobs WHERE tenant = 'acme'`)
	if err != nil {
		t.Fatal(err)
	}
	type span struct{ start, end int64 }
	var spans []span
	owners := map[string]bool{}
	for rows.Next() {
		var s span
		var owner string
		if err := rows.Scan(&s.start, &s.end, &owner); err != nil {
			t.Fatal(err)
		}
		spans, owners[owner] = append(spans, s), true
	}
	rows.Close()
	most := 0
	for _, a := range spans { // jobs running at a's start
		n := 0
		for _, b := range spans {
			if b.start <= a.start && a.start < b.end {
				n++
			}
		}
		most = max(most, n)
	}
	t.Logf("at most %d running at once; run by %d replicas", most, len(owners))
	if most > 2 || len(spans) != 12 || len(owners) < 2 {
		t.Fatalf("%d jobs run by %d replicas, at most %d at once; want 12 by 2 or more, at most 2 at once (max_running)", len(spans), len(owners), most)
	}
}
