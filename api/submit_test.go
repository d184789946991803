package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

func TestSubmit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{API: config.API{MaxWait: 200 * time.Millisecond}})
	h.fake.Handle = func(tenant string, c tools.Call) (*tools.Result, error) {
		if c.Name == "echo" {
			raw := []byte(c.Arguments)
			var s string
			if json.Unmarshal(raw, &s) == nil {
				raw = []byte(s) // OpenAI-style string arguments
			}
			var args struct{ Text string }
			_ = json.Unmarshal(raw, &args)
			return okResult(args.Text), nil
		}
		if c.Name == "fail" {
			return &tools.Result{OK: false, Error: "boom"}, nil
		}
		return nil, nil // stays queued
	}

	t.Run("accepted", func(t *testing.T) {
		rec := h.do("POST", "/v1/jobs", `{"tool":"queued","arguments":{"a":1},"call_id":"c1","limits":{"memory_bytes":1048576,"timeout_ms":1500}}`)
		if rec.Code != 202 {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		j := decodeJob(t, rec.Body.String())
		if rec.Header().Get("Location") != "/v1/jobs/"+j.ID || j.CallID != "c1" || j.State != job.StateQueued {
			t.Fatalf("job %+v location %q", j, rec.Header().Get("Location"))
		}
		if j.Limits.TimeoutMS != 1500 || j.Limits.MemoryBytes != 1<<20 {
			t.Fatalf("limits %+v", j.Limits)
		}
		if rec.Header().Get("Idempotent-Replayed") != "" {
			t.Fatal("a new job is not a replay")
		}
	})
	t.Run("wait finished", func(t *testing.T) {
		rec := h.do("POST", "/v1/jobs?wait=true", `{"tool":"echo","arguments":"{\"text\":\"hello\"}"}`)
		j := decodeJob(t, rec.Body.String())
		if rec.Code != 200 || j.State != job.StateSucceeded || j.Result == nil || j.Result.Content != "hello" {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
	t.Run("tool failure is a result", func(t *testing.T) {
		rec := h.do("POST", "/v1/jobs?wait=1", `{"tool":"fail"}`)
		j := decodeJob(t, rec.Body.String())
		if rec.Code != 200 || j.State != job.StateFailed || j.Result.OK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
	t.Run("wait elapses", func(t *testing.T) {
		for _, wait := range []string{"0.05", "50ms", "true", "1h"} {
			start := time.Now()
			rec := h.do("POST", "/v1/jobs?wait="+wait, `{"tool":"queued"}`)
			if rec.Code != 202 || decodeJob(t, rec.Body.String()).State != job.StateQueued {
				t.Fatalf("wait=%s: %d %s", wait, rec.Code, rec.Body)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Fatalf("wait=%s took %v (MaxWait 200ms)", wait, el)
			}
		}
	})
	t.Run("wait finished by another goroutine", func(t *testing.T) {
		rec := h.do("POST", "/v1/jobs", `{"tool":"queued"}`)
		id := decodeJob(t, rec.Body.String()).ID
		go func() {
			time.Sleep(20 * time.Millisecond)
			h.fake.Finish(id, okResult("late"))
		}()
		rec = h.do("GET", "/v1/jobs/"+id+"?wait=10s", "")
		if j := decodeJob(t, rec.Body.String()); rec.Code != 200 || j.Result.Content != "late" {
			t.Fatalf("get wait: %d %s", rec.Code, rec.Body)
		}
	})
	t.Run("idempotent replay", func(t *testing.T) {
		rec := h.do("POST", "/v1/jobs", `{"tool":"queued","idempotency_key":"k1"}`)
		first := decodeJob(t, rec.Body.String())
		rec = h.do("POST", "/v1/jobs", `{"tool":"queued"}`, "Idempotency-Key: k1")
		again := decodeJob(t, rec.Body.String())
		if rec.Code != 202 || again.ID != first.ID || rec.Header().Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay: %d %v %s", rec.Code, rec.Header(), rec.Body)
		}
		rec = h.do("POST", "/v1/jobs", `{"tool":"queued","idempotency_key":"k1"}`, "Idempotency-Key: k2")
		if rec.Code != 400 {
			t.Fatalf("differing keys: %d", rec.Code)
		}
		// The key for another request: 422 naming the key.
		rec = h.do("POST", "/v1/jobs", `{"tool":"other"}`, "Idempotency-Key: k1")
		if rec.Code != 422 || !strings.Contains(rec.Body.String(), `"code":"idempotency_key_reused"`) || !strings.Contains(rec.Body.String(), `k1`) {
			t.Fatalf("key reused: %d %s", rec.Code, rec.Body)
		}
	})
}

func TestSubmitCallShapes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Options{})
	for _, tc := range []struct {
		name, body, tool, callID, args string
	}{
		{"openai chat", `{"call":{"id":"call_1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"a\"}"}}}`, "echo", "call_1", `{"text":"a"}`},
		{"openai responses", `{"call":{"type":"function_call","call_id":"fc_1","name":"echo","arguments":"{\"text\":\"b\"}"}}`, "echo", "fc_1", `{"text":"b"}`},
		{"anthropic", `{"call":{"type":"tool_use","id":"toolu_1","name":"echo","input":{"text":"c"}}}`, "echo", "toolu_1", `{"text":"c"}`},
		{"mcp params", `{"call":{"name":"echo","arguments":{"text":"d"}}}`, "echo", "", `{"text":"d"}`},
		{"mcp json-rpc", `{"call":{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"e"}}}}`, "echo", "", `{"text":"e"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := h.do("POST", "/v1/jobs", tc.body)
			if rec.Code != 202 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			j := decodeJob(t, rec.Body.String())
			if j.Tool != tc.tool || (tc.callID != "" && j.CallID != tc.callID) || string(j.Arguments) != tc.args {
				t.Fatalf("job %+v args %s", j, j.Arguments)
			}
		})
	}
}

func TestSubmitErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		body    string
		query   string
		handle  error // returned by the fake's Submit
		status  int
		code    string
		mention string
	}{
		{name: "bad json", body: `{"tool":`, status: 400, code: CodeInvalidRequest, mention: "ends in the middle"},
		{name: "syntax", body: `{"tool" "x"}`, status: 400, code: CodeInvalidRequest, mention: "offset 9"},
		{name: "empty", body: ``, status: 400, code: CodeInvalidRequest, mention: "empty"},
		{name: "not an object", body: `[1]`, status: 400, code: CodeInvalidRequest, mention: "object"},
		{name: "unknown field", body: `{"tool":"echo","argumnets":{}}`, status: 400, code: CodeInvalidRequest, mention: `"argumnets"`},
		{name: "wrong type", body: `{"tool":5}`, status: 400, code: CodeInvalidRequest, mention: `"tool"`},
		{name: "wrong nested type", body: `{"tool":"echo","limits":{"pids":"many"}}`, status: 400, code: CodeInvalidRequest, mention: "limits.pids"},
		{name: "trailing data", body: `{"tool":"echo"} {"tool":"echo"}`, status: 400, code: CodeInvalidRequest, mention: "after the JSON value"},
		{name: "no tool", body: `{"arguments":{}}`, status: 400, code: CodeInvalidRequest, mention: "tool"},
		{name: "call and tool", body: `{"tool":"echo","call":{"name":"echo"}}`, status: 400, code: CodeInvalidRequest, mention: "excludes"},
		{name: "call without name", body: `{"call":{"foo":1}}`, status: 400, code: CodeInvalidRequest, mention: "missing tool name"},
		{name: "array arguments", body: `{"tool":"echo","arguments":[1]}`, status: 400, code: CodeInvalidRequest, mention: "arguments"},
		{name: "negative limit", body: `{"tool":"echo","limits":{"memory_bytes":-1}}`, status: 400, code: CodeInvalidRequest, mention: "limits.memory_bytes"},
		{name: "bad wait", body: `{"tool":"echo"}`, query: "?wait=soon", status: 400, code: CodeInvalidRequest, mention: "wait"},
		{name: "negative wait", body: `{"tool":"echo"}`, query: "?wait=-1", status: 400, code: CodeInvalidRequest, mention: "wait"},
		{name: "too large", body: `{"tool":"echo","arguments":{"text":"` + strings.Repeat("x", 2048) + `"}}`, status: 413, code: CodeBodyTooLarge, mention: "1024"},
		{name: "validation", body: `{"tool":"echo","arguments":{}}`, status: 422, code: CodeValidationFailed, mention: "text",
			handle: &tools.ValidationError{Tool: "echo", Problems: []tools.Problem{{Field: "/text", Message: "required"}}}},
		{name: "unknown tool", body: `{"tool":"nope"}`, status: 404, code: CodeUnknownTool, mention: "nope",
			handle: fmt.Errorf("%w: nope", tools.ErrUnknownTool)},
		{name: "queue full", body: `{"tool":"echo"}`, status: 429, code: CodeQueueFull, handle: job.ErrQueueFull},
		{name: "invalid", body: `{"tool":"echo","limits":{"pids":99999}}`, status: 400, code: CodeInvalidRequest, mention: "ceiling",
			handle: fmt.Errorf("%w: pids 99999 above the ceiling 512", job.ErrInvalid)},
		{name: "conflict", body: `{"tool":"echo"}`, status: 409, code: CodeConflict, handle: job.ErrConflict},
		{name: "shutdown", body: `{"tool":"echo"}`, status: 503, code: CodeShuttingDown, handle: job.ErrShutdown},
		{name: "internal", body: `{"tool":"echo"}`, status: 500, code: CodeInternal, handle: errors.New("disk on fire")},
		{name: "runner down", body: `{"tool":"echo"}`, status: 503, code: CodeUnavailable, mention: "docker daemon at unix:///x.sock",
			handle: fmt.Errorf("create session sandbox: %w: docker daemon at unix:///x.sock: connection refused", job.ErrUnavailable)},
		{name: "disk full", body: `{"tool":"echo"}`, status: 503, code: CodeDiskFull, mention: "no space left on the host's disk",
			handle: fmt.Errorf("create workspace: %w: write: no space left on device", job.ErrHostDiskFull)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Options{API: config.API{MaxBodyBytes: 1024}})
			h.fake.RetryAfter = 7
			h.fake.Handle = func(string, tools.Call) (*tools.Result, error) { return nil, tc.handle }
			rec := h.do("POST", "/v1/jobs"+tc.query, tc.body)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			e := decodeErr(t, rec.Body.String())
			if e.Code != tc.code || !strings.Contains(e.Message, tc.mention) {
				t.Fatalf("error %+v, want code %s mentioning %q", e, tc.code, tc.mention)
			}
			switch tc.status {
			case 422:
				if len(e.Details) != 1 || e.Details[0].Field != "/text" {
					t.Fatalf("details %+v", e.Details)
				}
			case 503:
				if rec.Header().Get("Retry-After") == "" {
					t.Fatal("503 without Retry-After")
				}
			case 429:
				if rec.Header().Get("Retry-After") != "7" {
					t.Fatalf("Retry-After %q", rec.Header().Get("Retry-After"))
				}
			case 500:
				if strings.Contains(rec.Body.String(), "fire") {
					t.Fatal("internal error text leaked to the client")
				}
			}
		})
	}
}
