package client

import (
	"context"
	"encoding/json"
	"net/url"
	"time"
)

// Turn is the answer of POST /v1/tool-calls (the fields a client reads;
// Raw keeps the whole answer).
type Turn struct {
	ID       string            `json:"id"`
	State    string            `json:"state"`
	Dialect  string            `json:"dialect"`
	Mode     string            `json:"mode"`
	Messages []json.RawMessage `json:"messages"`
	Text     *string           `json:"text"`
	Final    *string           `json:"final_answer"`
	// ReturnDirect: a return_direct tool answered; Final is its result
	// and the agent loop stops.
	ReturnDirect bool `json:"return_direct"`
	Calls        []struct {
		CallID  string `json:"call_id"`
		Tool    string `json:"tool"`
		JobID   string `json:"job_id"`
		State   string `json:"state"`
		OK      bool   `json:"ok"`
		Content string `json:"content"`
		// ReturnDirect: the call's tool is return_direct.
		ReturnDirect bool `json:"return_direct"`
	} `json:"calls"`
	Effects map[string]int `json:"effects"`
	// Tags and Metadata are the turn's labels (the body's "tags" and
	// "metadata").
	Tags     []string          `json:"tags"`
	Metadata map[string]string `json:"metadata"`
	Raw      json.RawMessage   `json:"-"`
}

// Completed reports whether every call has its answer.
func (t *Turn) Completed() bool { return t.State == "completed" }

// SubmitTurn posts one model turn (its body as the model wrote it) and
// waits up to wait for the answers (0: the server's default).
func (c *Client) SubmitTurn(ctx context.Context, body []byte, session, idempotencyKey string, wait time.Duration) (*Turn, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	if session != "" {
		q.Set("session_id", session)
	}
	path := "/v1/tool-calls"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var raw json.RawMessage
	if err := c.doHeaders(ctx, "POST", path, body, &raw, map[string]string{"Idempotency-Key": idempotencyKey}); err != nil {
		return nil, err
	}
	return decodeTurn(raw)
}

// GetTurn reads a batch, waiting up to wait for it to complete.
func (c *Client) GetTurn(ctx context.Context, id string, wait time.Duration) (*Turn, error) {
	path := "/v1/tool-calls/" + url.PathEscape(id) + waitQuery(wait)
	var raw json.RawMessage
	if err := c.do(ctx, "GET", path, nil, &raw); err != nil {
		return nil, err
	}
	return decodeTurn(raw)
}

func decodeTurn(raw json.RawMessage) (*Turn, error) {
	var t Turn
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, err
	}
	t.Raw = raw
	return &t, nil
}
