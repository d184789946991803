//go:build integration

package integration

import (
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/store/pgtest"
)

// sandboxd on a Postgres store (--store postgres://...): jobs run and
// survive a restart; a second sandboxd on the same database serves as
// another replica; the password is never logged; with the database
// stopped a submit is a clear 503 and nothing is recorded, and after it is
// back sandboxd serves again without a restart.
func TestPostgresStore(t *testing.T) {
	pg := pgtest.Start(t)
	u, err := url.Parse(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("postgres", "s3cr3tpw") // trust auth ignores it; the logs must not show it
	dsn := u.String()

	a := startServerArgs(t, "", "--store", dsn)
	j := a.run("", "calculator", map[string]any{"expression": "6*7"})
	if j.State != "succeeded" || !strings.Contains(j.Result.Content, "42") {
		t.Fatalf("calculator on postgres: %+v %+v", j, j.Result)
	}

	// A second sandboxd on the database is another replica: it serves
	// (its replica id defaults to the host name and its port).
	second := startServerArgs(t, "", "--store", dsn)
	if j2 := second.run("", "calculator", map[string]any{"expression": "6*8"}); j2.State != "succeeded" {
		t.Fatalf("calculator on a second replica: %+v", j2)
	}
	second.stop(syscall.SIGTERM)
	if strings.Contains(second.log.String(), "s3cr3tpw") {
		t.Fatalf("the password is in the log:\n%s", second.log.String())
	}

	// The database goes away: new work is refused with 503, nothing half
	// written; it comes back: sandboxd serves again.
	pg.Stop()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	resp, data := a.do("POST", "/v1/jobs", "", map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "1+1"}, "idempotency_key": "during-outage"}, &e)
	if resp.StatusCode != 503 || e.Error.Code != "store_unavailable" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("submit with the database stopped: %d %s", resp.StatusCode, data)
	}
	pg.Restart(t)
	var back jobView
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, data = a.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": "2+3"}}, &back)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the database came back: %d %s", resp.StatusCode, data)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if back.State != "succeeded" {
		t.Fatalf("job after the outage: %+v", back)
	}
	var list struct {
		Jobs []jobView `json:"jobs"`
	}
	a.do("GET", "/v1/jobs?limit=100", "", nil, &list)
	if len(list.Jobs) != 3 {
		t.Fatalf("jobs recorded: %d, want 3 (the second replica's; the refused one not among them): %+v", len(list.Jobs), list.Jobs)
	}

	// Restart sandboxd: the jobs are in the database, not the data dir.
	a.stop(syscall.SIGTERM)
	b := startServerArgs(t, "", "--store", dsn)
	var got jobView
	if resp, data := b.do("GET", "/v1/jobs/"+j.ID, "", nil, &got); resp.StatusCode != 200 || got.State != "succeeded" {
		t.Fatalf("job %s after a restart on a new data dir: %d %s", j.ID, resp.StatusCode, data)
	}
	if strings.Contains(a.log.String()+b.log.String(), "s3cr3tpw") {
		t.Fatal("the password is in a log")
	}
}
