package client_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/api/apitest"
	"github.com/sandboxd/sandboxd/api/client"
	"github.com/sandboxd/sandboxd/api/wire"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

func newServer(t *testing.T) (*apitest.Fake, string) {
	t.Helper()
	fake := apitest.New()
	fake.Handle = func(tenant string, c tools.Call) (*tools.Result, error) {
		switch c.Name {
		case "echo":
			return &tools.Result{OK: true, Content: string(c.Arguments)}, nil
		case "nope":
			return nil, tools.ErrUnknownTool
		case "strict":
			return nil, &tools.ValidationError{Tool: "strict", Problems: []tools.Problem{{Field: "/x", Message: "required"}}}
		}
		return nil, nil
	}
	srv := httptest.NewServer(api.New(fake, api.Options{Keys: map[string]string{"secret": "t1"}, Heartbeat: 10 * time.Millisecond}))
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

func TestClient(t *testing.T) {
	t.Parallel()
	fake, url := newServer(t)
	c := client.New(url+"/", "secret", nil)
	ctx := t.Context()

	j, err := c.Submit(ctx, client.SubmitRequest{Tool: "echo", Arguments: json.RawMessage(`{"x":1}`)}, time.Second)
	if err != nil || j.State != wire.StateSucceeded || j.Result.Content != `{"x":1}` || j.Tenant != "t1" {
		t.Fatalf("submit echo: %+v %v", j, err)
	}
	r, err := c.Run(ctx, "echo", map[string]int{"y": 2})
	if err != nil || !r.Result.OK || r.Result.Content != `{"y":2}` {
		t.Fatalf("run: %+v %v", r, err)
	}

	lim := &wire.Limits{MemoryBytes: 1 << 20, TimeoutMS: 1500}
	q, err := c.Submit(ctx, client.SubmitRequest{Tool: "later", IdempotencyKey: "k", Limits: lim}, 0)
	if err != nil || q.State != wire.StateQueued || q.Limits != *lim {
		t.Fatalf("submit later: %+v %v", q, err)
	}
	again, err := c.Submit(ctx, client.SubmitRequest{Tool: "later", IdempotencyKey: "k"}, 0)
	if err != nil || again.ID != q.ID {
		t.Fatalf("replay: %+v %v", again, err)
	}

	go func() {
		time.Sleep(20 * time.Millisecond)
		fake.Start(q.ID)
		fake.Output(q.ID, job.EventStdout, "out\n")
		fake.Output(q.ID, job.EventStderr, "err\n")
		fake.Finish(q.ID, &tools.Result{OK: true, Content: "done"})
	}()
	w, err := c.Wait(ctx, q.ID)
	if err != nil || w.Result.Content != "done" {
		t.Fatalf("wait: %+v %v", w, err)
	}
	var types []string
	var out string
	for ev, err := range c.Events(ctx, q.ID, -1) {
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		types = append(types, ev.Type)
		out += ev.Data
		if ev.Type == wire.EventFinished && (ev.Job == nil || ev.Job.Result.Content != "done") {
			t.Fatalf("finished event: %+v", ev)
		}
	}
	if strings.Join(types, ",") != "queued,started,stdout,stderr,finished" || out != "out\nerr\n" {
		t.Fatalf("events: %v %q", types, out)
	}
	// After the second event, and a break ends the stream.
	n := 0
	for ev, err := range c.Events(ctx, q.ID, 2) {
		if err != nil || ev.Seq != 3 {
			t.Fatalf("events after 2: %+v %v", ev, err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("events after 2: %d", n)
	}
	for _, err := range c.Events(ctx, "missing", -1) {
		if !client.IsNotFound(err) {
			t.Fatalf("events of a missing job: %v", err)
		}
	}

	jobs, next, err := c.List(ctx, client.ListOptions{Limit: 1})
	if err != nil || len(jobs) != 1 || next == "" || jobs[0].ID != q.ID {
		t.Fatalf("list: %v %q %v", jobs, next, err)
	}
	jobs, _, err = c.List(ctx, client.ListOptions{Limit: 5, Tool: "echo"})
	if err != nil || len(jobs) != 2 || jobs[1].ID != j.ID {
		t.Fatalf("list page 2: %v %v", jobs, err)
	}

	cj, err := c.Cancel(ctx, j.ID)
	if err != nil || cj.State != wire.StateSucceeded {
		t.Fatalf("cancel finished: %+v %v", cj, err)
	}
	g, err := c.Get(ctx, j.ID, 0)
	if err != nil || g.ID != j.ID || g.Result == nil {
		t.Fatalf("get: %+v %v", g, err)
	}
	if data, err := client.MarshalJob(g); err != nil || !strings.Contains(string(data), `"arguments": {`) {
		t.Fatalf("marshal job: %s %v", data, err)
	}

	_, err = c.Get(ctx, "missing", 0)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" || !client.IsNotFound(err) || ae.RequestID == "" {
		t.Fatalf("get missing: %v", err)
	}
	_, err = c.Submit(ctx, client.SubmitRequest{Tool: "nope"}, 0)
	if client.ErrorCode(err) != "unknown_tool" {
		t.Fatalf("unknown tool: %v", err)
	}
	_, err = c.Submit(ctx, client.SubmitRequest{Tool: "strict"}, 0)
	if !errors.As(err, &ae) || ae.Status != 422 || len(ae.Details) != 1 || ae.Details[0].Field != "/x" {
		t.Fatalf("validation: %v", err)
	}
	_, err = c.Tools(ctx, "xml")
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("tools xml: %v", err)
	}
	if _, err := c.Tools(ctx, ""); err != nil {
		t.Fatalf("tools: %v", err)
	}
	if v, err := c.Health(ctx); err != nil {
		t.Fatalf("health: %q %v", v, err)
	}

	_, err = client.New(url, "wrong", nil).Get(ctx, j.ID, 0)
	if !errors.As(err, &ae) || ae.Status != 401 || !strings.Contains(ae.Error(), "unauthorized") {
		t.Fatalf("wrong key: %v", err)
	}
}

func TestClientUnreachable(t *testing.T) {
	t.Parallel()
	_, err := client.New("http://127.0.0.1:1", "", nil).Get(t.Context(), "x", 0)
	var ae *client.APIError
	if err == nil || errors.As(err, &ae) {
		t.Fatalf("unreachable: %v", err)
	}
}

// TestImportGraph: a program importing the client gets the API's shapes
// and the standard library, nothing of the daemon.
func TestImportGraph(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/sandboxd/sandboxd/api/client").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ours []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/sandboxd/sandboxd/") {
			ours = append(ours, p)
		}
		for _, bad := range []string{"/job", "/runner", "/tools", "/store"} {
			if strings.Contains(p, "sandboxd/sandboxd"+bad) {
				t.Errorf("the client imports %s", p)
			}
		}
		if !strings.HasPrefix(p, "github.com/sandboxd/sandboxd/") && strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
			t.Errorf("the client imports a module outside the standard library: %s", p)
		}
	}
	if strings.Join(ours, " ") != "github.com/sandboxd/sandboxd/api/wire github.com/sandboxd/sandboxd/api/client" {
		t.Errorf("the client's sandboxd packages: %v", ours)
	}
}
