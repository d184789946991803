package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
)

// TurnService executes the tool calls of one model turn (POST
// /v1/tool-calls). *job.Turns implements it; New mounts the routes only
// when Options.Turns is set.
type TurnService interface {
	// Submit starts a batch; errors: job.ErrShutdown, job.ErrInvalid,
	// job.ErrSessionNotFound, job.ErrSessionClosed.
	Submit(ctx context.Context, tenant string, req job.TurnRequest) (*job.Batch, error)
	// Get returns a tenant's batch; another tenant's is job.ErrNotFound.
	Get(ctx context.Context, tenant, id string) (*job.Batch, error)
	// Wait blocks until the batch is completed or ctx ends (then the
	// current snapshot and ctx.Err()).
	Wait(ctx context.Context, tenant, id string) (*job.Batch, error)
}

// turnsResource serves /v1/tool-calls.
type turnsResource struct {
	*server
	ts TurnService
}

func (rs *turnsResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.Post("/", rs.submit)
	r.Get("/{id}", rs.get)
	return r
}

// TurnCallbackBody is the body of a turn's completion callback: the batch
// as GET /v1/tool-calls/{id} answers it (job.Config.TurnCallbackBody).
func TurnCallbackBody(b *job.Batch) ([]byte, error) {
	return json.Marshal(struct {
		Type  string     `json:"type"`
		Batch *batchView `json:"batch"`
	}{"turn.finished", viewBatch(b)})
}

func viewBatch(b *job.Batch) *batchView {
	v := &batchView{
		ID: b.ID, State: string(b.State), Dialect: string(b.Dialect), Mode: b.Mode, SessionID: b.SessionID,
		Calls: make([]callView, len(b.Calls)), Effects: map[string]int{},
		CreatedAt: b.CreatedAt, Finished: b.FinishedAt, Callback: viewCallback(b.Callback),
		Tags: tagsView(b.Tags), Metadata: metadataView(b.Metadata),
	}
	for i, c := range b.Calls {
		v.Calls[i] = viewCall(c)
	}
	for e, n := range b.Effects {
		v.Effects[string(e)] = n
	}
	switch {
	case b.State == job.BatchPendingApproval:
		v.Note = "a call needs a human's approval; the whole batch waits (GET this batch with ?wait= for its messages)"
	case b.State != job.BatchCompleted:
		v.Note = "the calls are still running (GET this batch with ?wait= for its messages)"
	case b.Dialect == tools.DialectReAct:
		text := tools.TurnObservation(b.Answers())
		v.Text = &text
		if b.HasFinal {
			f := b.FinalAnswer
			v.Final = &f
		}
	default:
		for _, m := range tools.TurnMessages(b.Dialect, b.Answers()) {
			data, err := json.Marshal(m)
			if err != nil {
				data, _ = json.Marshal(err.Error())
			}
			v.Messages = append(v.Messages, data)
		}
	}
	if answer, ok := b.DirectAnswer(); ok {
		v.ReturnDirect, v.Final = true, &answer
	}
	return v
}

// submit: POST /v1/tool-calls. The body is one assistant turn in any
// dialect (tools.ParseTurn); ?session_id= (or the body's "session_id")
// runs it in a session, Idempotency-Key makes a resent turn return the
// same batch and never run a call twice. The answer is 200 with the next
// turn's messages once every call is answered; 202 while an approval
// holds the batch (at once) or when ?wait= elapses first (default: wait
// up to api.max_wait).
func (rs *turnsResource) submit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	wait := rs.opts.MaxWait
	explicitWait := q.Has("wait")
	if explicitWait {
		var err error
		if wait, err = parseWait(q.Get("wait"), rs.opts.MaxWait); err != nil {
			rs.writeError(w, r, err)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rs.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			rs.writeError(w, r, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
				Message: fmt.Sprintf("the request body exceeds %d bytes", tooLarge.Limit)})
			return
		}
		rs.writeError(w, r, badRequest("reading the request body: "+err.Error()))
		return
	}
	turn, err := tools.ParseTurn(body)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKeyLen {
		rs.writeError(w, r, badRequest(fmt.Sprintf("Idempotency-Key is longer than %d bytes", maxIdempotencyKeyLen)))
		return
	}
	callback := q.Get("callback_url")
	if callback != "" && turn.CallbackURL != "" && callback != turn.CallbackURL {
		rs.writeError(w, r, badRequest("callback_url in the query and in the body differ"))
		return
	}
	if len(callback) > 2048 || len(turn.CallbackURL) > 2048 || !printable(callback) || !printable(turn.CallbackURL) {
		rs.writeError(w, r, badRequest("callback_url must be printable and at most 2048 bytes"))
		return
	}
	session := q.Get("session_id")
	if session != "" && turn.SessionID != "" && session != turn.SessionID {
		rs.writeError(w, r, badRequest(fmt.Sprintf("session_id %q in the query and %q in the body differ", session, turn.SessionID)))
		return
	}
	tenant := tenantFrom(r.Context())
	b, err := rs.ts.Submit(r.Context(), tenant, job.TurnRequest{Turn: turn, SessionID: session, CallbackURL: callback, IdempotencyKey: key})
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	logger(r.Context(), rs.log).Debug("turn submitted", "batch", b.ID, "dialect", b.Dialect, "calls", len(b.Calls), "state", b.State)
	w.Header().Set("Location", "/v1/tool-calls/"+url.PathEscape(b.ID))
	if b.State == job.BatchPendingApproval && !explicitWait {
		wait = 0 // a human may take minutes: answer at once
	}
	rs.respond(w, r, tenant, b, wait)
}

// get: GET /v1/tool-calls/{id}?wait=.
func (rs *turnsResource) get(w http.ResponseWriter, r *http.Request) {
	wait, err := parseWait(r.URL.Query().Get("wait"), rs.opts.MaxWait)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	tenant := tenantFrom(r.Context())
	b, err := rs.ts.Get(r.Context(), tenant, chi.URLParam(r, "id"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	rs.respond(w, r, tenant, b, wait)
}

// respond waits up to wait for b, then writes 200 (completed) or 202.
func (rs *turnsResource) respond(w http.ResponseWriter, r *http.Request, tenant string, b *job.Batch, wait time.Duration) {
	if wait > 0 && b.State != job.BatchCompleted {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		cur, err := rs.ts.Wait(ctx, tenant, b.ID)
		cancel()
		switch {
		case err == nil:
			b = cur
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			if cur != nil {
				b = cur
			}
		default:
			rs.writeError(w, r, err)
			return
		}
	}
	status := http.StatusAccepted
	if b.State == job.BatchCompleted {
		status = http.StatusOK
	}
	writeJSON(w, status, viewBatch(b))
}
