package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/runner"
)

// An Idempotency-Key names one request: a submission with a key the tenant
// has used returns that key's job when it is the same request, and is
// ErrIdempotencyKeyReused (422 naming the key) when it is not, as payment
// APIs answer. "The same" is judged after parsing and repair, not on the
// bytes: the same tool (aliases resolved), the same arguments in
// canonical JSON (key order, spacing, a repaired single-quoted dict all
// compare equal), the same session and the same effective limits.

// idemRequest is what a submission asks, as compared with a key's job.
type idemRequest struct {
	tool    string
	args    json.RawMessage
	session string
	limits  runner.Limits
}

func idemOf(j *Job) idemRequest {
	return idemRequest{tool: j.Tool, args: j.Args, session: j.SessionID, limits: j.Limits}
}

// differences lists what of want differs from the job's request; nil
// when it is the same request.
func (want idemRequest) differences(j *Job) []string {
	var d []string
	if want.tool != j.Tool {
		d = append(d, fmt.Sprintf("tool %s, not %s", want.tool, j.Tool))
	}
	if !sameJSON(want.args, j.Args) {
		d = append(d, "other arguments")
	}
	if want.session != j.SessionID {
		was := j.SessionID
		if was == "" {
			was = "none"
		}
		d = append(d, "session "+orNone(want.session)+", not "+was)
	}
	if want.limits != j.Limits {
		d = append(d, "other limits")
	}
	return d
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// sameJSON compares two JSON documents by value (numbers as written).
func sameJSON(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	ca, err1 := canonicalJSON(a)
	cb, err2 := canonicalJSON(b)
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}

func canonicalJSON(raw json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage(`{}`)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(v) // maps marshal with sorted keys
}

// replayKey is the job of the tenant's key when want is its request; a
// different request is ErrIdempotencyKeyReused; no job with the key is
// ErrNotFound.
func (s *Service) replayKey(ctx context.Context, tenant, key string, want idemRequest) (*Job, error) {
	j, err := s.st.GetByIdempotencyKey(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	if d := want.differences(j); len(d) > 0 {
		return nil, fmt.Errorf("%w: %q was sent with job %s, a different request (this one has %s); send a new key for a new request",
			ErrIdempotencyKeyReused, key, j.ID, strings.Join(d, ", "))
	}
	return j, nil
}

// replayAfterConflict is what a submission that lost the race for its key
// answers: the winner's job when it is the same request.
func (s *Service) replayAfterConflict(ctx context.Context, j *Job, createErr error) (*Job, bool, error) {
	existing, err := s.replayKey(ctx, j.Tenant, j.IdempotencyKey, idemOf(j))
	if errors.Is(err, ErrIdempotencyKeyReused) {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("submit: %w", createErr)
	}
	return existing, false, nil
}
