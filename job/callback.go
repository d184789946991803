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
	"net/url"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/internal/netclass"
)

// Completion callbacks: a job (or a turn: Turns.Submit, the event
// "turn.finished" and the batch as GET /v1/tool-calls/{id} answers it,
// attempts kept with the batch in memory) submitted with a callback URL is
// POSTed its
// final record when it ends (whatever the end: succeeded, failed, refused by
// the guard, cancelled, lost in a restart found at Start is not: see
// Callback), signed like the approval webhook:
//
//	POST <callback_url>
//	X-Sandboxd-Event: job.finished
//	X-Sandboxd-Timestamp: <Unix seconds>
//	X-Sandboxd-Signature: sha256=<hex HMAC-SHA256(secret, timestamp + "." + body)>
//
//	{"type": "job.finished", "job": {...}}   (the job as GET /v1/jobs/{id} shows it)
//
// The secret is the tenant's (Config.CallbackSecrets). A delivery that
// fails (transport error, a non-2xx answer, a redirect: none is followed)
// is retried after Callbacks.Backoff, doubling, up to Callbacks.Attempts
// deliveries; an address the guard refuses is not retried. Every attempt is
// recorded on the job (Job.Callback) and counted in
// sandboxd_callback_deliveries_total{tenant,outcome}.
//
// The URL reaches only what the address guard allows (netclass.Guard with
// callbacks.allow_private_cidrs and sandboxd's own addresses): a literal
// address is checked when the job is submitted (ErrInvalid), a name at each
// delivery, on every address it resolves to, and the connection goes to
// the address checked.

// Callback states.
const (
	CallbackPending   = "pending"   // the job has not ended, or a delivery is due
	CallbackDelivered = "delivered" // a delivery was answered 2xx
	CallbackFailed    = "failed"    // every attempt failed, or the address is refused
)

// Callback is a job's completion webhook and its delivery attempts.
type Callback struct {
	URL      string            `json:"url"`
	State    string            `json:"state"`
	Attempts []CallbackAttempt `json:"attempts,omitempty"`
}

// CallbackAttempt is one delivery of a callback.
type CallbackAttempt struct {
	At time.Time `json:"at"`
	// DurationMS is how long the delivery took, to the answer or error.
	DurationMS int64 `json:"duration_ms"`
	// Status is the receiver's HTTP status (0 when none came back).
	Status int `json:"status,omitempty"`
	// Error says why the attempt failed ("" when it was delivered).
	Error string `json:"error,omitempty"`
}

// maxCallbackURLLen bounds a callback URL.
const maxCallbackURLLen = 2048

func cloneCallback(c *Callback) *Callback {
	if c == nil {
		return nil
	}
	d := *c
	d.Attempts = append([]CallbackAttempt(nil), c.Attempts...)
	return &d
}

// checkCallbackURL validates a submitted callback URL: an absolute http or
// https URL without credentials whose literal host (if it is one) the guard
// allows, for a tenant with a signing secret.
func (s *Service) checkCallbackURL(tenant, raw string) error {
	if len(raw) > maxCallbackURLLen {
		return fmt.Errorf("%w: callback_url is longer than %d bytes", ErrInvalid, maxCallbackURLLen)
	}
	if _, ok := s.cfg.CallbackSecrets[tenant]; !ok {
		return fmt.Errorf("%w: callback_url needs a signing secret for tenant %q (the operator sets tenants[].callback_secret or callbacks.secret)", ErrInvalid, tenant)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%w: callback_url %q: %v", ErrInvalid, raw, err)
	}
	if !u.IsAbs() || u.Host == "" {
		return fmt.Errorf("%w: callback_url %q must be an absolute http or https URL", ErrInvalid, raw)
	}
	if u.User != nil {
		return fmt.Errorf("%w: callback_url must not carry credentials (verify the X-Sandboxd-Signature instead)", ErrInvalid)
	}
	if u.Fragment != "" {
		return fmt.Errorf("%w: callback_url must not have a fragment", ErrInvalid)
	}
	if err := s.callbackGuard().CheckURL(u); err != nil {
		return fmt.Errorf("%w: callback_url: %v (callbacks.allow_private_cidrs opens private networks)", ErrInvalid, err)
	}
	return nil
}

func (s *Service) callbackGuard() *netclass.Guard {
	return netclass.NewGuard(s.cfg.CallbackPrivate, s.cfg.Protected)
}

// newCallbackClient is the client of callback deliveries: it dials only
// where the guard allows and follows no redirect.
func newCallbackClient(g *netclass.Guard, lookup func(context.Context, string) ([]netip.Addr, error), timeout time.Duration) *http.Client {
	d := &netclass.Dialer{Guard: g, Lookup: lookup, Timeout: timeout}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         d.DialContext,
			TLSHandshakeTimeout: timeout,
			MaxIdleConns:        16,
			IdleConnTimeout:     30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// startCallback delivers j's callback in the background; j is the final
// record, already stored.
func (s *Service) startCallback(j *Job) {
	if j.Callback == nil || j.Callback.URL == "" {
		return
	}
	body, err := s.cfg.CallbackBody(j)
	if err != nil {
		s.log.Error("encode callback", "job", j.ID, "err", err)
		return
	}
	j = cloneJob(j)
	s.hooks.Go(func() {
		s.deliverCallback(j.Tenant, j.ID, j.Callback, "job.finished", body, func(*Callback) { s.recordCallback(j) })
	})
}

// deliverCallback delivers body to cb.URL, signed with the tenant's
// secret, retrying with backoff; after every attempt cb holds it and
// save records cb (what delivers a job's stores it with the job; a
// batch's keeps it in the batch).
func (s *Service) deliverCallback(tenant, what string, cb *Callback, event string, body []byte, save func(*Callback)) {
	secret := []byte(s.cfg.CallbackSecrets[tenant])
	backoff := s.cfg.Callbacks.Backoff
	for attempt := len(cb.Attempts) + 1; ; attempt++ {
		start := time.Now()
		status, err := s.postCallback(cb.URL, event, secret, body)
		a := CallbackAttempt{At: start.UTC(), DurationMS: time.Since(start).Milliseconds(), Status: status}
		var refused *netclass.Refusal
		switch {
		case err == nil:
			cb.State = CallbackDelivered
			s.m.callbacks.WithLabelValues(tenant, "delivered").Inc()
		case errors.As(err, &refused):
			a.Error = "refused: " + refused.Error()
			cb.State = CallbackFailed
			s.m.callbacks.WithLabelValues(tenant, "refused").Inc()
		default:
			a.Error = err.Error()
			s.m.callbacks.WithLabelValues(tenant, "failed").Inc()
			if attempt >= s.cfg.Callbacks.Attempts {
				cb.State = CallbackFailed
			}
		}
		cb.Attempts = append(cb.Attempts, a)
		save(cb)
		if cb.State != CallbackPending {
			if cb.State == CallbackFailed {
				s.log.Warn("callback failed", "of", what, "attempts", attempt, "err", a.Error)
			}
			return
		}
		select {
		case <-s.quit: // still pending in the record: the next start resumes it
			return
		case <-time.After(backoff):
		}
		backoff *= 2
	}
}

// recordCallback stores the job's callback state (the job is terminal:
// nothing else writes its record any more).
func (s *Service) recordCallback(j *Job) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.st.Update(ctx, j); err != nil && !errors.Is(err, ErrNotFound) {
		s.log.Warn("record callback attempt", "job", j.ID, "err", err)
	}
}

// postCallback makes one delivery; status is the answer's, 0 without one.
func (s *Service) postCallback(u, event string, secret, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Callbacks.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandboxd-callback")
	req.Header.Set("X-Sandboxd-Event", event)
	req.Header.Set("X-Sandboxd-Timestamp", ts)
	req.Header.Set("X-Sandboxd-Signature", WebhookSignature(secret, ts, body))
	resp, err := s.cfg.CallbackClient.Do(req)
	if err != nil {
		var refused *netclass.Refusal
		if errors.As(err, &refused) {
			return 0, refused
		}
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("the receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

// DefaultTurnCallbackBody encodes a finished batch's callback body with
// the batch as this package marshals it; the daemon sets
// Config.TurnCallbackBody to the API's shape (the next turn's messages).
func DefaultTurnCallbackBody(b *Batch) ([]byte, error) {
	return json.Marshal(struct {
		Type  string `json:"type"`
		Batch *Batch `json:"batch"`
	}{"turn.finished", b})
}

// DefaultCallbackBody encodes the callback body with the job as this
// package marshals it; the daemon sets Config.CallbackBody to the API's
// shape.
func DefaultCallbackBody(j *Job) ([]byte, error) {
	return json.Marshal(struct {
		Type string `json:"type"`
		Job  *Job   `json:"job"`
	}{"job.finished", j})
}
