package client_test

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/api/apitest"
	"github.com/sandboxd/sandboxd/api/client"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
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
		}
		return nil, nil
	}
	srv := httptest.NewServer(api.New(fake, api.Options{Keys: map[string]string{"secret": "t1"}}))
	t.Cleanup(srv.Close)
	return fake, srv.URL
}

func TestClient(t *testing.T) {
	t.Parallel()
	fake, url := newServer(t)
	c := client.New(url+"/", "secret", nil)
	ctx := t.Context()

	j, err := c.Submit(ctx, client.SubmitRequest{Tool: "echo", Arguments: json.RawMessage(`{"x":1}`)}, time.Second)
	if err != nil || j.State != job.StateSucceeded || j.Result.Content != `{"x":1}` || j.Tenant != "t1" {
		t.Fatalf("submit echo: %+v %v", j, err)
	}

	lim := runner.Limits{MemoryBytes: 1 << 20, Timeout: 1500 * time.Millisecond}
	q, err := c.Submit(ctx, client.SubmitRequest{Tool: "later", IdempotencyKey: "k", Limits: lim}, 0)
	if err != nil || q.State != job.StateQueued || q.Limits != lim {
		t.Fatalf("submit later: %+v %v", q, err)
	}
	again, err := c.Submit(ctx, client.SubmitRequest{Tool: "later", IdempotencyKey: "k"}, 0)
	if err != nil || again.ID != q.ID {
		t.Fatalf("replay: %+v %v", again, err)
	}

	go func() {
		time.Sleep(20 * time.Millisecond)
		fake.Finish(q.ID, &tools.Result{OK: true, Content: "done"})
	}()
	w, err := c.Wait(ctx, q.ID)
	if err != nil || w.Result.Content != "done" {
		t.Fatalf("wait: %+v %v", w, err)
	}

	jobs, next, err := c.List(ctx, job.ListFilter{Limit: 1})
	if err != nil || len(jobs) != 1 || next == "" || jobs[0].ID != q.ID {
		t.Fatalf("list: %v %q %v", jobs, next, err)
	}
	jobs, next, err = c.List(ctx, job.ListFilter{Limit: 1, Cursor: next, State: job.StateSucceeded})
	if err != nil || len(jobs) != 1 || next != "" || jobs[0].ID != j.ID {
		t.Fatalf("list page 2: %v %q %v", jobs, next, err)
	}

	cj, err := c.Cancel(ctx, j.ID)
	if err != nil || cj.State != job.StateSucceeded {
		t.Fatalf("cancel finished: %+v %v", cj, err)
	}
	g, err := c.Get(ctx, j.ID, 0)
	if err != nil || g.ID != j.ID || g.Result == nil {
		t.Fatalf("get: %+v %v", g, err)
	}

	_, err = c.Get(ctx, "missing", 0)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" || !client.IsNotFound(err) {
		t.Fatalf("get missing: %v", err)
	}
	_, err = c.Submit(ctx, client.SubmitRequest{Tool: "nope"}, 0)
	if !errors.As(err, &ae) || ae.Code != "unknown_tool" {
		t.Fatalf("unknown tool: %v", err)
	}
	_, err = c.Tools(ctx, "xml")
	if !errors.As(err, &ae) || ae.Status != 400 {
		t.Fatalf("tools xml: %v", err)
	}
	if _, err := c.Tools(ctx, ""); err != nil {
		t.Fatalf("tools: %v", err)
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
