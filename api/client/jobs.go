package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/api/wire"
)

// SubmitRequest is one tool call to run (the body of POST /v1/jobs).
type SubmitRequest = wire.SubmitRequest

// Submit submits a call. With wait > 0 the server holds the request until
// the job finishes or wait (capped by the server) elapses; the returned job
// may still be queued or running (see Wait). An idempotent replay returns
// the existing job.
func (c *Client) Submit(ctx context.Context, req SubmitRequest, wait time.Duration) (*wire.Job, error) {
	var j wire.Job
	if err := c.do(ctx, http.MethodPost, "/v1/jobs"+waitQuery(wait), req, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Run submits a call of tool with args (any value that marshals to a JSON
// object; nil: none) and waits until it finishes or ctx ends.
func (c *Client) Run(ctx context.Context, tool string, args any) (*wire.Job, error) {
	return c.RunIn(ctx, "", tool, args)
}

// RunIn is Run in a session ("": none).
func (c *Client) RunIn(ctx context.Context, session, tool string, args any) (*wire.Job, error) {
	req := SubmitRequest{Tool: tool, SessionID: session}
	if args != nil {
		data, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		req.Arguments = data
	}
	j, err := c.Submit(ctx, req, 5*time.Minute)
	if err != nil || j.State.Terminal() {
		return j, err
	}
	return c.Wait(ctx, j.ID)
}

// Get returns a job. With wait > 0 it waits up to wait for the job to finish.
func (c *Client) Get(ctx context.Context, id string, wait time.Duration) (*wire.Job, error) {
	var j wire.Job
	if err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+waitQuery(wait), nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Wait polls (long-polling the server) until the job is terminal or ctx ends.
func (c *Client) Wait(ctx context.Context, id string) (*wire.Job, error) {
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

// ListOptions select jobs; zero fields do not filter. Tenant is for an
// operator key.
type ListOptions struct {
	Tool, State, Session, Tenant string
	Since, Until                 time.Time
	Limit                        int
	Cursor                       string
	// Tags and Metadata keep the jobs with every tag and metadata pair.
	Tags     []string
	Metadata map[string]string
}

// List returns a page of the tenant's jobs, newest first, and the cursor of
// the next page ("" on the last).
func (c *Client) List(ctx context.Context, o ListOptions) ([]*wire.Job, string, error) {
	q := url.Values{}
	for k, v := range map[string]string{"tool": o.Tool, "state": o.State, "session": o.Session, "tenant": o.Tenant, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		q.Set("until", o.Until.Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	labelQuery(q, o.Tags, o.Metadata)
	var out wire.JobList
	if err := c.do(ctx, http.MethodGet, withQuery("/v1/jobs", q), nil, &out); err != nil {
		return nil, "", err
	}
	return out.Jobs, out.NextCursor, nil
}

// Cancel cancels a job and returns it.
func (c *Client) Cancel(ctx context.Context, id string) (*wire.Job, error) {
	var j wire.Job
	if err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Timeline returns the job's life from its persisted events.
func (c *Client) Timeline(ctx context.Context, id string) (*wire.Timeline, error) {
	var t wire.Timeline
	if err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/timeline", nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// Artifact downloads an artifact of a job (its result's artifacts[].name)
// and returns its bytes and mime type.
func (c *Client) Artifact(ctx context.Context, id, name string) ([]byte, string, error) {
	resp, err := c.raw(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/artifacts/"+url.PathEscape(name), nil, "")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return data, resp.Header.Get("Content-Type"), err
}

// maxEventLine bounds one line of the event stream.
const maxEventLine = 8 << 20

// Events streams the job's events (replayed from the start, or after the
// event with sequence number after when after >= 0) until the finished
// event, as an iterator; a failure is yielded once as the last pair.
// Breaking out of the loop closes the stream.
func (c *Client) Events(ctx context.Context, id string, after int) iter.Seq2[wire.Event, error] {
	return func(yield func(wire.Event, error) bool) {
		req, err := c.newRequest(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/events", nil, "")
		if err != nil {
			yield(wire.Event{}, err)
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		if after >= 0 {
			req.Header.Set("Last-Event-ID", strconv.Itoa(after))
		}
		resp, err := c.send(req)
		if err != nil {
			yield(wire.Event{}, err)
			return
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data.Len() == 0 {
					continue
				}
				var ev wire.Event
				if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
					yield(wire.Event{}, fmt.Errorf("sandboxd: decode event: %w", err))
					return
				}
				data.Reset()
				if !yield(ev, nil) || ev.Type == wire.EventFinished {
					return
				}
			case strings.HasPrefix(line, "data:"):
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			}
		}
		err = sc.Err()
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		yield(wire.Event{}, fmt.Errorf("sandboxd: event stream of %s ended before the finished event: %w", id, err))
	}
}

// Tools returns the tool catalogue, each tool as JSON: sandboxd's own shape
// (wire.Tool) when format is "", else exported for "openai", "anthropic"
// or "mcp".
func (c *Client) Tools(ctx context.Context, format string) ([]json.RawMessage, error) {
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	var out wire.ToolList
	if err := c.do(ctx, http.MethodGet, withQuery("/v1/tools", q), nil, &out); err != nil {
		return nil, err
	}
	return out.Tools, nil
}

// ToolList returns the catalogue in sandboxd's own shape.
func (c *Client) ToolList(ctx context.Context) ([]wire.Tool, error) {
	raw, err := c.Tools(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]wire.Tool, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("sandboxd: decode tool: %w", err)
		}
	}
	return out, nil
}

// Tool returns one tool as JSON in format ("": sandboxd's own shape).
func (c *Client) Tool(ctx context.Context, name, format string) (json.RawMessage, error) {
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	var out json.RawMessage
	if err := c.do(ctx, http.MethodGet, withQuery("/v1/tools/"+url.PathEscape(name), q), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ReloadTools reloads the tools directory (an operator key) and returns
// the server's answer.
func (c *Client) ReloadTools(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.do(ctx, http.MethodPost, "/v1/admin/tools/reload", nil, &out)
	return out, err
}

// Dashboard returns the dashboard's numbers (Prometheus text), scoped to
// the key.
func (c *Client) Dashboard(ctx context.Context) (string, error) {
	resp, err := c.raw(ctx, http.MethodGet, "/v1/dashboard", nil, "")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return string(data), err
}

// DashboardSeries returns the console's charts over window (0: the
// server's default) as JSON.
func (c *Client) DashboardSeries(ctx context.Context, window time.Duration) (json.RawMessage, error) {
	q := url.Values{}
	if window > 0 {
		q.Set("window", window.String())
	}
	var out json.RawMessage
	err := c.do(ctx, http.MethodGet, withQuery("/v1/dashboard/series", q), nil, &out)
	return out, err
}

// labelQuery adds a list's label filters to q.
func labelQuery(q url.Values, tags []string, metadata map[string]string) {
	for _, t := range tags {
		q.Add("tag", t)
	}
	for k, v := range metadata {
		q.Set("metadata."+k, v)
	}
}

// MarshalJob renders a job as the API shows it, indented, as `sandboxd
// run --output json` prints it.
func MarshalJob(j *wire.Job) ([]byte, error) {
	return json.MarshalIndent(j, "", "  ")
}
