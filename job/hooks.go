package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/tools"
)

// Tool hooks (config hooks[]): an operator's HTTP endpoints around the
// calls of a tenant's tools matching a glob. They run in the worker, after
// the guard's own decision (a call the guard refused never reaches a
// hook), and before (the before hook) and after (the after hook) the tool
// runs. Requests are POSTed JSON signed like callbacks (X-Sandboxd-
// Timestamp, X-Sandboxd-Signature, WebhookSignature), through a client
// that dials only where netclass's guard allows (the hook's
// allow_private_cidrs, never sandboxd's own addresses) and follows no
// redirect. Each request and its outcome is recorded on the job (Hooks).
//
// A before hook answers {"action":"allow"} (or an empty 2xx body),
// {"action":"deny","reason":"..."} or {"action":"allow","arguments":{...}}:
// rewritten arguments are validated against the tool's schema again and
// recorded as the job's arguments. An after hook may answer
// {"content":"..."} to replace what the model reads (redaction). A hook
// that fails (timeout, connection, non-2xx, a bad answer) fails closed
// (before: the call is refused; after: the result is withheld) unless the
// hook says fail_open.

// HookRecord is one hook request of a job.
type HookRecord struct {
	Phase string `json:"phase"` // before or after
	URL   string `json:"url"`
	// Outcome: allow, deny, rewrite, redact, pass (after, unchanged), or
	// error (the hook failed; FailOpen says what that meant).
	Outcome    string    `json:"outcome"`
	Reason     string    `json:"reason,omitempty"`
	Error      string    `json:"error,omitempty"`
	FailOpen   bool      `json:"fail_open,omitempty"`
	Status     int       `json:"status,omitempty"`
	DurationMS int64     `json:"duration_ms"`
	Time       time.Time `json:"time"`
}

// hook is a configured hook with its client.
type hook struct {
	cfg    config.Hook
	secret []byte
	client *http.Client
}

// newHooks builds the configured hooks (secret: the hook's, else the
// callbacks' secret).
func newHooks(cfg []config.Hook, callbackSecret string, protected *netclass.Protected, lookup func(context.Context, string) ([]netip.Addr, error)) []*hook {
	var out []*hook
	for _, h := range cfg {
		var private []netip.Prefix
		for _, p := range h.AllowPrivateCIDRs {
			if pre, err := netip.ParsePrefix(p); err == nil {
				private = append(private, pre.Masked())
			}
		}
		if h.Timeout <= 0 {
			h.Timeout = 5 * time.Second
		}
		if h.Tools == "" {
			h.Tools = "*"
		}
		secret := h.Secret
		if secret == "" {
			secret = callbackSecret
		}
		out = append(out, &hook{cfg: h, secret: []byte(secret),
			client: newCallbackClient(netclass.NewGuard(private, protected), lookup, h.Timeout)})
	}
	return out
}

// hooksFor are the hooks of a tenant's tool, in configuration order.
func (s *Service) hooksFor(tenant, tool string) []*hook {
	var out []*hook
	for _, h := range s.toolHooks {
		if h.cfg.Tenant != "" && h.cfg.Tenant != "*" && h.cfg.Tenant != tenant {
			continue
		}
		if ok, _ := path.Match(h.cfg.Tools, tool); ok {
			out = append(out, h)
		}
	}
	return out
}

type hookCall struct {
	Phase     string          `json:"phase"`
	JobID     string          `json:"job_id"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Tenant    string          `json:"tenant"`
	Session   string          `json:"session,omitempty"`
	Effects   []tools.Effect  `json:"effects"`
	Result    *hookResult     `json:"result,omitempty"`
}

type hookResult struct {
	OK      bool   `json:"ok"`
	Content string `json:"content"`
	Error   string `json:"error,omitempty"`
}

type hookAnswer struct {
	Action    string          `json:"action"`
	Reason    string          `json:"reason"`
	Arguments json.RawMessage `json:"arguments"`
	Content   *string         `json:"content"`
}

// post sends one hook request and decodes its answer (an empty body is
// the zero answer).
func (h *hook) post(ctx context.Context, u string, body []byte) (hookAnswer, int, error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return hookAnswer{}, 0, err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandboxd-hook")
	req.Header.Set("X-Sandboxd-Event", "tool.hook")
	req.Header.Set("X-Sandboxd-Timestamp", ts)
	req.Header.Set("X-Sandboxd-Signature", WebhookSignature(h.secret, ts, body))
	resp, err := h.client.Do(req)
	if err != nil {
		return hookAnswer{}, 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return hookAnswer{}, resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		return hookAnswer{}, resp.StatusCode, fmt.Errorf("the hook answered %s", resp.Status)
	}
	a, err := decodeHookAnswer(data)
	return a, resp.StatusCode, err
}

// decodeHookAnswer reads a hook's answer (untrusted: FuzzDecodeHookAnswer):
// one JSON object of the known fields, or an empty body.
func decodeHookAnswer(data []byte) (hookAnswer, error) {
	var a hookAnswer
	if len(bytes.TrimSpace(data)) == 0 {
		return a, nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return hookAnswer{}, fmt.Errorf("the hook's answer is not a hook answer: %v", err)
	}
	if dec.More() {
		return hookAnswer{}, errors.New("the hook's answer has data after its JSON object")
	}
	if len(a.Arguments) > 0 && string(a.Arguments) != "null" && bytes.TrimSpace(a.Arguments)[0] != '{' {
		return hookAnswer{}, errors.New("the hook's arguments are not a JSON object")
	}
	return a, nil
}

// runBefore asks the before hooks of e's call in order. It returns the
// refusal (a failed result) when one denies or fails closed; a rewrite
// replaces the entry's arguments (validated again) and the job's.
func (s *Service) runBefore(ctx context.Context, e *entry, j *Job) (refused *tools.Result) {
	if e.tool == nil {
		return nil
	}
	for _, h := range s.hooksFor(j.Tenant, j.Tool) {
		if h.cfg.Before == "" {
			continue
		}
		e.mu.Lock()
		body, _ := json.Marshal(hookCall{Phase: "before", JobID: j.ID, Tool: j.Tool, Arguments: j.Args, Tenant: j.Tenant,
			Session: j.SessionID, Effects: e.tool.Effects})
		e.mu.Unlock()
		start := time.Now()
		a, status, err := h.post(ctx, h.cfg.Before, body)
		rec := HookRecord{Phase: "before", URL: h.cfg.Before, Status: status, Time: start.UTC(), FailOpen: h.cfg.FailOpen}
		var args map[string]any
		var call tools.Call
		if err == nil {
			switch a.Action {
			case "", "allow":
				rec.Outcome = "allow"
				if len(a.Arguments) > 0 && string(a.Arguments) != "null" {
					call, _, args, err = s.reg.Prepare(tools.Call{ID: j.CallID, Name: j.Tool, Arguments: a.Arguments})
					if err != nil {
						err = fmt.Errorf("the hook's rewritten arguments are invalid: %v", err)
					} else {
						rec.Outcome = "rewrite"
					}
				}
			case "deny":
				rec.Outcome, rec.Reason = "deny", a.Reason
			default:
				err = fmt.Errorf("the hook's action %q is not allow or deny", a.Action)
			}
		}
		rec.DurationMS = time.Since(start).Milliseconds()
		if err != nil {
			rec.Outcome, rec.Error = "error", hookError(err, h.cfg.Timeout)
		}
		e.mu.Lock()
		j.Hooks = append(j.Hooks, rec)
		if rec.Outcome == "rewrite" {
			j.Args, e.args = call.Arguments, args
		}
		s.storeUpdate(j)
		e.mu.Unlock()
		switch {
		case rec.Outcome == "deny":
			msg := a.Reason
			if msg == "" {
				msg = "the call was refused by a hook"
			}
			return &tools.Result{OK: false, Error: "refused by hook: " + msg}
		case rec.Outcome == "error" && !h.cfg.FailOpen:
			return &tools.Result{OK: false, Error: "refused: the before hook failed (" + rec.Error + ") and fails closed"}
		}
	}
	return nil
}

// runAfter shows the result to the after hooks in order; one may replace
// its content. A hook failing closed withholds the content.
func (s *Service) runAfter(ctx context.Context, e *entry, j *Job, res *tools.Result) {
	if e.tool == nil {
		return
	}
	for _, h := range s.hooksFor(j.Tenant, j.Tool) {
		if h.cfg.After == "" {
			continue
		}
		e.mu.Lock()
		body, _ := json.Marshal(hookCall{Phase: "after", JobID: j.ID, Tool: j.Tool, Arguments: j.Args, Tenant: j.Tenant,
			Session: j.SessionID, Effects: e.tool.Effects, Result: &hookResult{OK: res.OK, Content: res.Content, Error: res.Error}})
		e.mu.Unlock()
		start := time.Now()
		a, status, err := h.post(ctx, h.cfg.After, body)
		rec := HookRecord{Phase: "after", URL: h.cfg.After, Status: status, Time: start.UTC(), FailOpen: h.cfg.FailOpen, Outcome: "pass"}
		if err == nil && (a.Action != "" || len(a.Arguments) > 0) {
			err = errors.New("an after hook answers only content")
		}
		rec.DurationMS = time.Since(start).Milliseconds()
		switch {
		case err != nil:
			rec.Outcome, rec.Error = "error", hookError(err, h.cfg.Timeout)
			if !h.cfg.FailOpen {
				res.Content = "[the result is withheld: the after hook failed and fails closed]"
				res.Process = nil
			}
		case a.Content != nil:
			rec.Outcome = "redact"
			res.Content = *a.Content
			if res.Process != nil { // the raw streams would show what was redacted
				res.Process.Stdout, res.Process.Stderr = "", ""
			}
		}
		e.mu.Lock()
		j.Hooks = append(j.Hooks, rec)
		e.mu.Unlock()
	}
}

func hookError(err error, timeout time.Duration) string {
	var refused *netclass.Refusal
	switch {
	case errors.As(err, &refused):
		return "refused by the address guard: " + refused.Error()
	case errors.Is(err, context.DeadlineExceeded) || isTimeoutErr(err):
		return fmt.Sprintf("timed out after %s", timeout)
	}
	return err.Error()
}

func isTimeoutErr(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
