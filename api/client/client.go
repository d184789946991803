// Package client is the Go client of the sandboxd HTTP API: jobs (submit,
// wait, list, cancel, events as an iterator over server-sent events, the
// timeline, artifacts), the tool catalogue in each format, sessions and
// their workspace files and archives, approvals, model turns (POST
// /v1/tool-calls) and the dashboard. Its values are package wire's, the
// shapes the server renders; it imports nothing of the daemon
// (TestImportGraph).
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

	"github.com/sandboxd/sandboxd/api/wire"
)

// APIError is a non-2xx answer of the server.
type APIError struct {
	Status  int
	Code    string // e.g. unauthorized, unknown_tool, invalid_arguments, not_found
	Message string
	Details []wire.Problem
	// RequestID is the server's X-Request-ID of the request.
	RequestID string
	// RetryAfter is the Retry-After header in seconds (429, 503), else 0.
	RetryAfter int
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("sandboxd: HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("sandboxd: %s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// ErrorCode is the API error code of err ("" when err is not an
// *APIError).
func ErrorCode(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsNotFound reports whether err is a 404 from the server.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
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

// URL is the server's base URL.
func (c *Client) URL() string { return c.base }

// Health is GET /healthz: the server's version.
func (c *Client) Health(ctx context.Context) (string, error) {
	var out struct {
		Status  string `json:"status"`
		Version string `json:"version"`
	}
	err := c.do(ctx, http.MethodGet, "/healthz", nil, &out)
	return out.Version, err
}

func waitQuery(wait time.Duration) string {
	if wait <= 0 {
		return ""
	}
	return "?wait=" + url.QueryEscape(wait.String())
}

// withQuery appends q (when not empty) to path.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

func (c *Client) do(ctx context.Context, method, path string, body any, out any) error {
	return c.doHeaders(ctx, method, path, body, out, nil)
}

// doHeaders sends body (nil, []byte as it is, else JSON of it) with more
// request headers (empty values are not sent) and decodes a 2xx answer
// into out (nil: discarded).
func (c *Client) doHeaders(ctx context.Context, method, path string, body any, out any, headers map[string]string) error {
	var rd io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ct = bytes.NewReader(b), "application/json"
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd, ct = bytes.NewReader(data), "application/json"
	}
	if v, ok := headers["Content-Type"]; ok && v != "" {
		ct = v
	}
	req, err := c.newRequest(ctx, method, path, rd, ct)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("sandboxd: decode %s %s response: %w", method, path, err)
	}
	return nil
}

func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	return req, nil
}

// send does req and returns a 2xx response; any other is read and
// returned as an *APIError.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// raw sends a non-JSON body and returns a 2xx response (errors decoded).
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := c.newRequest(ctx, method, path, body, contentType)
	if err != nil {
		return nil, err
	}
	return c.send(req)
}

func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-ID")}
	e.RetryAfter, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	var body wire.ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.Details = body.Error.Code, body.Error.Message, body.Error.Details
		if body.Error.RequestID != "" {
			e.RequestID = body.Error.RequestID
		}
		return e
	}
	e.Message = strings.TrimSpace(string(data))
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}
