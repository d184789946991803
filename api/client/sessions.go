package client

import (
	"context"
	"encoding/json"
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

// SessionRequest asks for a session; zero fields take the server's
// defaults.
type SessionRequest struct {
	Image       string
	Effects     []tools.Effect
	Limits      runner.Limits
	TTL         time.Duration
	IdleTimeout time.Duration
	Tags        []string
	Metadata    map[string]string
}

type wireSessionRequest struct {
	Image              string            `json:"image,omitempty"`
	Effects            []tools.Effect    `json:"effects,omitempty"`
	Limits             *wireLimits       `json:"limits,omitempty"`
	TTLSeconds         int64             `json:"ttl_seconds,omitempty"`
	IdleTimeoutSeconds int64             `json:"idle_timeout_seconds,omitempty"`
	Tags               []string          `json:"tags,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
}

type wireSession struct {
	ID                 string            `json:"id"`
	Tenant             string            `json:"tenant"`
	Image              string            `json:"image"`
	Effects            []tools.Effect    `json:"effects"`
	Limits             wireLimits        `json:"limits"`
	State              job.SessionState  `json:"state"`
	Reason             string            `json:"reason"`
	TTLSeconds         int64             `json:"ttl_seconds"`
	IdleTimeoutSeconds int64             `json:"idle_timeout_seconds"`
	CreatedAt          time.Time         `json:"created_at"`
	ExpiresAt          time.Time         `json:"expires_at"`
	LastUsedAt         time.Time         `json:"last_used_at"`
	ClosedAt           *time.Time        `json:"closed_at,omitempty"`
	Tags               []string          `json:"tags,omitempty"`
	Metadata           map[string]string `json:"metadata,omitempty"`
}

func (w *wireSession) session() *job.Session {
	return &job.Session{
		ID: w.ID, Tenant: w.Tenant, Image: w.Image, Effects: w.Effects, Limits: w.Limits.limits(),
		State: w.State, Reason: w.Reason,
		TTL: time.Duration(w.TTLSeconds) * time.Second, IdleTimeout: time.Duration(w.IdleTimeoutSeconds) * time.Second,
		CreatedAt: w.CreatedAt, ExpiresAt: w.ExpiresAt, LastUsedAt: w.LastUsedAt, ClosedAt: w.ClosedAt,
		Tags: nonEmpty(w.Tags), Metadata: nonEmptyMap(w.Metadata),
	}
}

// CreateSession creates a session.
func (c *Client) CreateSession(ctx context.Context, req SessionRequest) (*job.Session, error) {
	body := wireSessionRequest{Image: req.Image, Effects: req.Effects,
		TTLSeconds: int64(req.TTL / time.Second), IdleTimeoutSeconds: int64(req.IdleTimeout / time.Second),
		Tags: req.Tags, Metadata: req.Metadata}
	if req.Limits != (runner.Limits{}) {
		l := fromLimits(req.Limits)
		body.Limits = &l
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	var w wireSession
	if err := c.do(ctx, http.MethodPost, "/v1/sessions", data, &w); err != nil {
		return nil, err
	}
	return w.session(), nil
}

// GetSession returns a session.
func (c *Client) GetSession(ctx context.Context, id string) (*job.Session, error) {
	var w wireSession
	if err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, &w); err != nil {
		return nil, err
	}
	return w.session(), nil
}

// ListSessions returns a page of the tenant's sessions, newest first.
func (c *Client) ListSessions(ctx context.Context, f job.SessionFilter) ([]*job.Session, string, error) {
	q := url.Values{}
	if f.State != "" {
		q.Set("state", string(f.State))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	labelQuery(q, f.LabelFilter)
	path := "/v1/sessions"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out struct {
		Sessions   []wireSession `json:"sessions"`
		NextCursor string        `json:"next_cursor"`
	}
	if err := c.do(ctx, http.MethodGet, path, nil, &out); err != nil {
		return nil, "", err
	}
	list := make([]*job.Session, len(out.Sessions))
	for i := range out.Sessions {
		list[i] = out.Sessions[i].session()
	}
	return list, out.NextCursor, nil
}

// DeleteSession closes a session (its sandbox and workspace are destroyed).
func (c *Client) DeleteSession(ctx context.Context, id string) (*job.Session, error) {
	var w wireSession
	if err := c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, &w); err != nil {
		return nil, err
	}
	return w.session(), nil
}

// filePath escapes each segment of a workspace path.
func filePath(id, p string) string {
	parts := strings.Split(strings.TrimLeft(p, "/"), "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return "/v1/sessions/" + url.PathEscape(id) + "/files/" + strings.Join(parts, "/")
}

// PutFile writes r to path in the session's workspace.
func (c *Client) PutFile(ctx context.Context, id, path string, r io.Reader) (*job.FileInfo, error) {
	resp, err := c.raw(ctx, http.MethodPut, filePath(id, path), r, "application/octet-stream")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var fi job.FileInfo
	if err := json.NewDecoder(resp.Body).Decode(&fi); err != nil {
		return nil, fmt.Errorf("sandboxd: decode put file response: %w", err)
	}
	return &fi, nil
}

// GetFile reads path of the session's workspace. For a file it returns its
// content (the caller closes it); for a directory, its listing.
func (c *Client) GetFile(ctx context.Context, id, path string) (io.ReadCloser, []job.FileInfo, error) {
	resp, err := c.raw(ctx, http.MethodGet, filePath(id, path), nil, "")
	if err != nil {
		return nil, nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		defer resp.Body.Close()
		var list struct {
			Entries []job.FileInfo `json:"entries"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return nil, nil, fmt.Errorf("sandboxd: decode listing: %w", err)
		}
		return nil, list.Entries, nil
	}
	return resp.Body, nil, nil
}

// PutArchive unpacks a tar (optionally gzipped) into dir of the workspace
// and returns the number of entries written.
func (c *Client) PutArchive(ctx context.Context, id, dir string, r io.Reader) (int, error) {
	resp, err := c.raw(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/archive?path="+url.QueryEscape(dir), r, "application/x-tar")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Entries int `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("sandboxd: decode archive response: %w", err)
	}
	return out.Entries, nil
}

// GetArchive returns a tar of dir of the workspace; the caller closes it.
func (c *Client) GetArchive(ctx context.Context, id, dir string) (io.ReadCloser, error) {
	resp, err := c.raw(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id)+"/archive?path="+url.QueryEscape(dir), nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// raw sends a non-JSON body and returns a 2xx response (errors decoded).
func (c *Client) raw(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
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
