package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/job"
)

// jobsResource serves /v1/jobs.
type jobsResource struct{ *server }

func (rs *jobsResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.With(rs.requireTenant).Post("/", rs.submit)
	r.Get("/", rs.list)
	r.Route("/{id}", func(r chi.Router) {
		r.Get("/", rs.get)
		// Answered by the replica holding the job (forward.go).
		r.With(rs.requireTenant, rs.fwd.jobRoute).Post("/cancel", rs.cancel)
		r.With(rs.fwd.jobRoute).Get("/events", rs.events)
		if ts, ok := rs.svc.(TimelineService); ok {
			r.Get("/timeline", (&timelines{rs.server, ts}).get)
		}
		if as, ok := rs.svc.(ArtifactService); ok {
			r.Get("/artifacts/{name}", (&artifacts{rs.server, as}).get)
		}
	})
	return r
}

// submit: 202 with the job (and Location) when it is accepted and not yet
// finished, 200 when the returned job is terminal (?wait, or an idempotent
// replay of a finished job). A replay sets Idempotent-Replayed: true.
func (rs *jobsResource) submit(w http.ResponseWriter, r *http.Request) {
	wait, err := parseWait(r.URL.Query().Get("wait"), rs.opts.MaxWait)
	if err != nil {
		rs.writeError(w, r, err)
		return
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
	if rs.fwd.toSession(w, r, peekSessionID(body), body) {
		return // the session's replica answers
	}
	req, err := decodeSubmit(body, r.Header.Get("Idempotency-Key"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	tenant := tenantFrom(r.Context())
	j, created, err := rs.svc.Submit(r.Context(), tenant, req)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	logger(r.Context(), rs.log).Debug("job submitted", "job_id", j.ID, "tool", j.Tool, "created", created)
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(j.ID))
	rs.respondJob(w, r, tenant, j, wait)
}

// respondJob waits up to wait for j to finish, then writes 200 (terminal)
// or 202 (still queued or running).
func (rs *jobsResource) respondJob(w http.ResponseWriter, r *http.Request, tenant string, j *job.Job, wait time.Duration) {
	if wait > 0 && !j.State.Terminal() {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		cur, err := rs.svc.Wait(ctx, tenant, j.ID)
		cancel()
		switch {
		case err == nil:
			j = cur
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
			// The wait elapsed, or the server is shutting down (its base
			// context is cancelled): answer with the current snapshot.
			if cur != nil {
				j = cur
			}
		default:
			rs.writeError(w, r, err)
			return
		}
	}
	status := http.StatusAccepted
	if j.State.Terminal() {
		status = http.StatusOK
	}
	writeJSON(w, status, viewJob(j))
}

func (rs *jobsResource) get(w http.ResponseWriter, r *http.Request) {
	wait, err := parseWait(r.URL.Query().Get("wait"), rs.opts.MaxWait)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	if wait > 0 && rs.fwd.toJob(w, r, chi.URLParam(r, "id")) {
		return // the job's replica answers when it ends
	}
	tenant := readScope(r.Context())
	j, err := rs.svc.Get(r.Context(), tenant, chi.URLParam(r, "id"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	if wait == 0 {
		writeJSON(w, http.StatusOK, viewJob(j))
		return
	}
	rs.respondJob(w, r, tenant, j, wait)
}

// list: GET /v1/jobs?tool=&state=&session=&since=&until=&tag=&metadata.KEY=&tenant=&limit=&cursor=,
// newest first (tag may repeat: every one must match; so must every
// metadata.KEY=VALUE). since and until (RFC 3339) bound created_at; tenant is the
// operator's filter (a tenant's key may name only itself).
func (rs *jobsResource) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := job.ListFilter{Tool: q.Get("tool"), State: job.State(q.Get("state")), SessionID: q.Get("session"), Cursor: q.Get("cursor")}
	switch f.State {
	case "", job.StateQueued, job.StateRunning, job.StateSucceeded, job.StateFailed, job.StateCancelled, job.StatePendingApproval:
	default:
		rs.writeError(w, r, badRequest(fmt.Sprintf("state %q is not one of queued, pending_approval, running, succeeded, failed, cancelled", f.State)))
		return
	}
	var err error
	if f.LabelFilter, err = parseLabelFilter(q); err != nil {
		rs.writeError(w, r, err)
		return
	}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		rs.writeError(w, r, err)
		return
	}
	if f.Since, err = parseTime("since", q.Get("since")); err != nil {
		rs.writeError(w, r, err)
		return
	}
	if f.Until, err = parseTime("until", q.Get("until")); err != nil {
		rs.writeError(w, r, err)
		return
	}
	scope, err := listScope(r)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	jobs, next, err := rs.svc.List(r.Context(), scope, f)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	out := jobList{Jobs: make([]*jobView, 0, len(jobs)), NextCursor: next}
	for _, j := range jobs {
		out.Jobs = append(out.Jobs, viewJob(j))
	}
	writeJSON(w, http.StatusOK, out)
}

func (rs *jobsResource) cancel(w http.ResponseWriter, r *http.Request) {
	j, err := rs.svc.Cancel(r.Context(), tenantFrom(r.Context()), chi.URLParam(r, "id"))
	if errors.Is(err, job.ErrFenced) && rs.fwd.toJob(w, r, chi.URLParam(r, "id")) {
		return // claimed by another replica meanwhile: cancelled there
	}
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewJob(j))
}

// parseWait reads ?wait: "" or "false" → no wait; "true" → max; a Go
// duration ("10s", "1m30s") or a number of seconds ("2.5"). Waits above max
// are capped to max.
func parseWait(s string, max time.Duration) (time.Duration, error) {
	var d time.Duration
	switch s {
	case "", "false", "0":
		return 0, nil
	case "true":
		return max, nil
	}
	if secs, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(secs) || math.IsInf(secs, 0) || secs < 0 {
			return 0, badRequest(fmt.Sprintf("wait %q must be a non-negative number of seconds or a duration like 10s", s))
		}
		if secs >= max.Seconds() {
			return max, nil
		}
		d = time.Duration(secs * float64(time.Second))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return 0, badRequest(fmt.Sprintf("wait %q must be true, a duration like 10s or a number of seconds", s))
		}
	}
	return min(d, max), nil
}

// parseTime reads an RFC 3339 time of a list filter ("" → zero).
func parseTime(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, badRequest(fmt.Sprintf("%s %q is not an RFC 3339 time like 2026-01-02T15:04:05Z", name, s))
	}
	return t, nil
}

// listScope is the tenant a list reads: ?tenant= for the operator (every
// tenant without it); a tenant's key reads its own, and naming another
// tenant is 403.
func listScope(r *http.Request) (string, error) {
	want := r.URL.Query().Get("tenant")
	scope := readScope(r.Context())
	switch {
	case want == "":
		return scope, nil
	case scope == job.AllTenants:
		if len(want) > 128 || want == job.AllTenants {
			return "", badRequest(fmt.Sprintf("tenant %q is not a tenant name", want))
		}
		return want, nil
	case want != scope:
		return "", &Error{Status: http.StatusForbidden, Code: CodeForbidden, Message: "a tenant's key lists its own tenant's only"}
	}
	return scope, nil
}

// parseLimit reads a list's ?limit= (0 when absent: the service default).
func parseLimit(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 500 {
		return 0, badRequest(fmt.Sprintf("limit %q must be an integer from 1 to 500", s))
	}
	return n, nil
}
