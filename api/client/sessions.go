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

	"github.com/sandboxd/sandboxd/api/wire"
)

// SessionRequest asks for a session (the body of POST /v1/sessions); zero
// fields take the server's defaults.
type SessionRequest = wire.SessionRequest

// CreateSession creates a session.
func (c *Client) CreateSession(ctx context.Context, req SessionRequest) (*wire.Session, error) {
	var s wire.Session
	if err := c.do(ctx, http.MethodPost, "/v1/sessions", req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSession returns a session.
func (c *Client) GetSession(ctx context.Context, id string) (*wire.Session, error) {
	var s wire.Session
	if err := c.do(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// SessionListOptions select sessions; zero fields do not filter.
type SessionListOptions struct {
	State  string
	Limit  int
	Cursor string
	// Tags and Metadata keep the sessions with every tag and metadata pair.
	Tags     []string
	Metadata map[string]string
}

// ListSessions returns a page of the tenant's sessions, newest first.
func (c *Client) ListSessions(ctx context.Context, o SessionListOptions) ([]*wire.Session, string, error) {
	q := url.Values{}
	if o.State != "" {
		q.Set("state", o.State)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	labelQuery(q, o.Tags, o.Metadata)
	var out wire.SessionList
	if err := c.do(ctx, http.MethodGet, withQuery("/v1/sessions", q), nil, &out); err != nil {
		return nil, "", err
	}
	return out.Sessions, out.NextCursor, nil
}

// DeleteSession closes a session (its sandbox and workspace are destroyed).
func (c *Client) DeleteSession(ctx context.Context, id string) (*wire.Session, error) {
	var s wire.Session
	if err := c.do(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
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
func (c *Client) PutFile(ctx context.Context, id, path string, r io.Reader) (*wire.FileInfo, error) {
	resp, err := c.raw(ctx, http.MethodPut, filePath(id, path), r, "application/octet-stream")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var fi wire.FileInfo
	if err := json.NewDecoder(resp.Body).Decode(&fi); err != nil {
		return nil, fmt.Errorf("sandboxd: decode put file response: %w", err)
	}
	return &fi, nil
}

// GetFile reads path of the session's workspace. For a file it returns its
// content (the caller closes it); for a directory, its listing.
func (c *Client) GetFile(ctx context.Context, id, path string) (io.ReadCloser, []wire.FileInfo, error) {
	resp, err := c.raw(ctx, http.MethodGet, filePath(id, path), nil, "")
	if err != nil {
		return nil, nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		defer resp.Body.Close()
		var list wire.FileList
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			return nil, nil, fmt.Errorf("sandboxd: decode listing: %w", err)
		}
		return nil, list.Entries, nil
	}
	return resp.Body, nil, nil
}

// ReadFile returns the content of a file of the session's workspace.
func (c *Client) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	rc, _, err := c.GetFile(ctx, id, path)
	if err != nil {
		return nil, err
	}
	if rc == nil {
		return nil, fmt.Errorf("sandboxd: %s is a directory", path)
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// ListFiles returns the listing of a directory of the session's workspace
// ("" or "/": its root).
func (c *Client) ListFiles(ctx context.Context, id, dir string) ([]wire.FileInfo, error) {
	rc, list, err := c.GetFile(ctx, id, dir)
	if err != nil {
		return nil, err
	}
	if rc != nil {
		rc.Close()
		return nil, fmt.Errorf("sandboxd: %s is not a directory", dir)
	}
	return list, nil
}

// PutArchive unpacks a tar (optionally gzipped) into dir of the workspace
// and returns the number of entries written.
func (c *Client) PutArchive(ctx context.Context, id, dir string, r io.Reader) (int, error) {
	resp, err := c.raw(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/archive?path="+url.QueryEscape(dir), r, "application/x-tar")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out wire.ArchiveResult
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
