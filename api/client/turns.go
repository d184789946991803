package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/sandboxd/sandboxd/api/wire"
)

// Turn is a batch (POST /v1/tool-calls, GET /v1/tool-calls/{id}); Raw
// keeps the server's answer as it came.
type Turn struct {
	wire.Batch
	Raw json.RawMessage `json:"-"`
}

// Completed reports whether every call has its answer.
func (t *Turn) Completed() bool { return t.State == wire.BatchCompleted }

// TurnOptions go with a turn; zero fields are not sent.
type TurnOptions struct {
	// SessionID runs the calls in that session.
	SessionID string
	// IdempotencyKey makes a resent turn return the same batch.
	IdempotencyKey string
	// CallbackURL is POSTed {"type":"turn.finished","batch":{...}} when
	// every call is answered.
	CallbackURL string
	// Wait is how long the server holds the answer (0: its default).
	Wait time.Duration
	// ContentType of the body: application/json (default) or text/plain
	// (a ReAct turn).
	ContentType string
}

// PostTurn posts one model turn, its body as the model wrote it (an
// OpenAI or Anthropic assistant message, a Responses output, ReAct text).
func (c *Client) PostTurn(ctx context.Context, body []byte, o TurnOptions) (*Turn, error) {
	q := url.Values{}
	if o.Wait > 0 {
		q.Set("wait", o.Wait.String())
	}
	if o.SessionID != "" {
		q.Set("session_id", o.SessionID)
	}
	if o.CallbackURL != "" {
		q.Set("callback_url", o.CallbackURL)
	}
	var raw json.RawMessage
	h := map[string]string{"Idempotency-Key": o.IdempotencyKey, "Content-Type": o.ContentType}
	if err := c.doHeaders(ctx, http.MethodPost, withQuery("/v1/tool-calls", q), body, &raw, h); err != nil {
		return nil, err
	}
	return decodeTurn(raw)
}

// SubmitTurn is PostTurn with a session, an idempotency key and a wait.
func (c *Client) SubmitTurn(ctx context.Context, body []byte, session, idempotencyKey string, wait time.Duration) (*Turn, error) {
	return c.PostTurn(ctx, body, TurnOptions{SessionID: session, IdempotencyKey: idempotencyKey, Wait: wait})
}

// GetTurn reads a batch, waiting up to wait for it to complete.
func (c *Client) GetTurn(ctx context.Context, id string, wait time.Duration) (*Turn, error) {
	var raw json.RawMessage
	if err := c.do(ctx, http.MethodGet, "/v1/tool-calls/"+url.PathEscape(id)+waitQuery(wait), nil, &raw); err != nil {
		return nil, err
	}
	return decodeTurn(raw)
}

func decodeTurn(raw json.RawMessage) (*Turn, error) {
	var t Turn
	if err := json.Unmarshal(raw, &t.Batch); err != nil {
		return nil, err
	}
	t.Raw = raw
	return &t, nil
}
