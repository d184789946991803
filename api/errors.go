package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// Error codes of the JSON error body {"error":{"code","message","details"}}.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeBodyTooLarge     = "body_too_large"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeUnknownTool      = "unknown_tool"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeValidationFailed = "validation_failed"
	CodeQueueFull        = "queue_full"
	CodeShuttingDown     = "shutting_down"
	CodeTimeout          = "timeout"
	CodeInternal         = "internal"
	CodeEffectNotAllowed = "effect_not_allowed"
	CodeSessionLimit     = "session_limit"
	CodeSessionClosed    = "session_closed"
	CodeUnsupported      = "unsupported"
	CodeWorkspaceFull    = "workspace_full"
	CodeUnavailable      = "unavailable"
	CodeDiskFull         = "disk_full"
	// CodeIdempotencyKeyReused: the key was used for a different request.
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	CodeStoreUnavailable     = "store_unavailable"
	// CodeReplicaUnavailable: the replica holding the session or job
	// does not answer a forwarded request.
	CodeReplicaUnavailable = "replica_unavailable"
)

// Error is an API error: an HTTP status and the JSON error body. Handlers
// return it for problems found at the edge (bad JSON, bad query); errors
// from the job service are classified by classify.
type Error struct {
	Status  int
	Code    string
	Message string
	// Details is a list of problems (validation errors), omitted when empty.
	Details []tools.Problem
	// RetryAfter, in seconds, is sent as Retry-After when positive.
	RetryAfter int
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func badRequest(msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: msg}
}

// classify is the one place that maps an error to an HTTP status.
func (s *server) classify(err error) *Error {
	var apiErr *Error
	var verr *tools.ValidationError
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &verr):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeValidationFailed, Message: verr.Error(), Details: verr.Problems}
	case errors.Is(err, tools.ErrUnknownFormat), errors.Is(err, tools.ErrUnknownDialect):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: err.Error()}
	case errors.Is(err, tools.ErrUnknownTool):
		return &Error{Status: http.StatusNotFound, Code: CodeUnknownTool, Message: err.Error()}
	case errors.Is(err, job.ErrSessionNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "session not found"}
	case errors.Is(err, job.ErrBatchNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "batch not found"}
	case errors.Is(err, job.ErrFileNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: err.Error()}
	case errors.Is(err, job.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Code: CodeNotFound, Message: "job not found"}
	case errors.Is(err, job.ErrEffectNotAllowed):
		return &Error{Status: http.StatusForbidden, Code: CodeEffectNotAllowed, Message: err.Error()}
	case errors.Is(err, job.ErrSessionLimit):
		return &Error{Status: http.StatusTooManyRequests, Code: CodeSessionLimit, Message: err.Error(), RetryAfter: 5}
	case errors.Is(err, job.ErrSessionClosed):
		return &Error{Status: http.StatusConflict, Code: CodeSessionClosed, Message: err.Error()}
	case errors.Is(err, job.ErrUnsupported):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeUnsupported, Message: err.Error()}
	case errors.Is(err, job.ErrTooLarge):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge, Message: err.Error()}
	case errors.Is(err, job.ErrNoSpace):
		// The session's disk limit, not a fault of the server: 507 as a
		// WebDAV server answers a full quota.
		return &Error{Status: http.StatusInsufficientStorage, Code: CodeWorkspaceFull, Message: err.Error()}
	case errors.Is(err, job.ErrIdempotencyKeyReused):
		return &Error{Status: http.StatusUnprocessableEntity, Code: CodeIdempotencyKeyReused, Message: err.Error()}
	case errors.Is(err, job.ErrInvalid):
		return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Message: err.Error()}
	case errors.Is(err, job.ErrConflict):
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()}
	case errors.Is(err, job.ErrQueueFull):
		retry := s.svc.QueueRetryAfter()
		if retry < 1 {
			retry = 1
		}
		return &Error{Status: http.StatusTooManyRequests, Code: CodeQueueFull, Message: "the job queue is full; retry later", RetryAfter: retry}
	case errors.Is(err, job.ErrUnavailable):
		// The runner's daemon is down: the message names it; retry.
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error(), RetryAfter: 5}
	case errors.Is(err, job.ErrHostDiskFull):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeDiskFull, Message: err.Error(), RetryAfter: 30}
	case errors.Is(err, job.ErrStoreUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeStoreUnavailable, Message: "the job store is unavailable; nothing was recorded, retry later", RetryAfter: 2}
	case errors.Is(err, job.ErrLeaseLost):
		// This replica lost its lease and stops: another one serves.
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown, Message: "this replica lost its lease and is stopping; retry (another replica serves)", RetryAfter: 1}
	case errors.Is(err, job.ErrFenced):
		// Another replica took the job meanwhile (and was not reached).
		return &Error{Status: http.StatusConflict, Code: CodeConflict, Message: "another replica holds this job now; retry"}
	case errors.Is(err, job.ErrShutdown):
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeShuttingDown, Message: "the service is shutting down", RetryAfter: 5}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusGatewayTimeout, Code: CodeTimeout, Message: "the request timed out"}
	default:
		return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
	}
}

// writeError classifies err and writes the JSON error body. Server errors
// (but 507, a full workspace: the client's limit) are logged with the
// request ID; their text never reaches the client.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := s.classify(err)
	if e.Status >= 500 && e.Status != http.StatusInsufficientStorage {
		logger(r.Context(), s.log).Error("request failed", "status", e.Status, "err", err)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxd"`)
	}
	writeJSON(w, e.Status, errorBody{Error: errorPayload{
		Code: e.Code, Message: e.Message, Details: viewProblems(e.Details),
		RequestID: requestIDFrom(r.Context()),
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}
