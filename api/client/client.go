// Package client is a small Go client of the sandboxd HTTP API.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// APIError is a non-2xx answer of the server.
type APIError struct {
	Status  int
	Code    string
	Message string
	Details []tools.Problem
	// RetryAfter is the Retry-After header in seconds (429, 503), else 0.
	RetryAfter int
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("sandboxd: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("sandboxd: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Client talks to one sandboxd server. It is safe for concurrent use.
type Client struct {
	base   string
	apiKey string
	hc     *http.Client
}

// New returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080"). apiKey may be empty when the server has no
// keys; hc nil means http.DefaultClient.
func New(baseURL, apiKey string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), apiKey: apiKey, hc: hc}
}

// SubmitRequest is one tool call to run. Set Tool (and Arguments, an object
// or a JSON string holding one), or Call (a raw OpenAI, Anthropic or MCP
// tool call).
type SubmitRequest struct {
	Tool           string
	Arguments      json.RawMessage
	CallID         string
	Call           json.RawMessage
	IdempotencyKey string
	Limits         runner.Limits
	// SessionID runs the call in that session.
	SessionID string
	// Tags and Metadata label the job (the server bounds them: labels.*).
	Tags     []string
	Metadata map[string]string
}

// Submit submits a call. With wait > 0 the server holds the request until
// the job finishes or wait (capped by the server) elapses; the returned job
// may still be queued or running (see Wait). An idempotent replay returns
// the existing job.
func (c *Client) Submit(ctx context.Context, req SubmitRequest, wait time.Duration) (*job.Job, error) {
	body := wireSubmit{
		Tool: req.Tool, Arguments: req.Arguments, CallID: req.CallID, Call: req.Call,
		IdempotencyKey: req.IdempotencyKey, SessionID: req.SessionID,
		Tags: req.Tags, Metadata: req.Metadata,
	}
	if req.Limits != (runner.Limits{}) {
		l := fromLimits(req.Limits)
		body.Limits = &l
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	var j wireJob
	if err := c.do(ctx, http.MethodPost, "/v1/jobs"+waitQuery(wait), data, &j); err != nil {
		return nil, err
	}
	return j.job(), nil
}

// Get returns a job. With wait > 0 it waits up to wait for the job to finish.
func (c *Client) Get(ctx context.Context, id string, wait time.Duration) (*job.Job, error) {
	var j wireJob
	if err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+waitQuery(wait), nil, &j); err != nil {
		return nil, err
	}
	return j.job(), nil
}

// Wait polls (long-polling the server) until the job is terminal or ctx ends.
func (c *Client) Wait(ctx context.Context, id string) (*job.Job, error) {
	for {
		j, err := c.Get(ctx, id, 5*time.Minute)
		if err != nil {
			return nil, err
		}
		if j.State.Terminal() {
			return j, nil
		}
		if err := ctx.Err(); err != nil {
			return j, err
		}
	}
}

// List returns a page of the tenant's jobs, newest first, and the cursor of
// the next page ("" on the last).
func (c *Client) List(ctx context.Context, f job.ListFilter) ([]*job.Job, string, error) {
	q := url.Values{}
	for k, v := range map[string]string{"tool": f.Tool, "state": string(f.State), "cursor": f.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	labelQuery(q, f.LabelFilter)
	path := "/v1/jobs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Jobs       []wireJob `json:"jobs"`
		NextCursor string    `json:"next_cursor"`
	}
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, "", err
	}
	jobs := make([]*job.Job, 0, len(out.Jobs))
	for i := range out.Jobs {
		jobs = append(jobs, out.Jobs[i].job())
	}
	return jobs, out.NextCursor, nil
}

// Cancel cancels a job and returns it.
func (c *Client) Cancel(ctx context.Context, id string) (*job.Job, error) {
	var j wireJob
	if err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &j); err != nil {
		return nil, err
	}
	return j.job(), nil
}

// Tools returns the tool catalogue, each tool as JSON: sandboxd's own shape
// (name, description, input_schema, output_schema, effects, parallel_safe)
// when format is "", else exported for "openai", "anthropic" or "mcp".
func (c *Client) Tools(ctx context.Context, format string) ([]json.RawMessage, error) {
	path := "/v1/tools"
	if format != "" {
		path += "?format=" + url.QueryEscape(format)
	}
	var out struct {
		Tools []json.RawMessage `json:"tools"`
	}
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

func waitQuery(wait time.Duration) string {
	if wait <= 0 {
		return ""
	}
	return "?wait=" + url.QueryEscape(wait.String())
}

// maxErrorBody bounds how much of a non-JSON error answer is kept.
const maxErrorBody = 4 << 10

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	return c.doHeaders(ctx, method, path, body, out, nil)
}

// doHeaders is do with more request headers (empty values are not sent).
func (c *Client) doHeaders(ctx context.Context, method, path string, body []byte, out any, headers map[string]string) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("sandboxd: decode %s %s response: %w", method, path, err)
	}
	return nil
}

func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode}
	e.RetryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	var body struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Details []tools.Problem `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.Details = body.Error.Code, body.Error.Message, body.Error.Details
		return e
	}
	e.Message = strings.TrimSpace(string(data))
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// IsNotFound reports whether err is a 404 from the server.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}
