package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/job"
)

// TimelineService is the optional part of the job service that serves GET
// /v1/jobs/{id}/timeline. *job.Service implements it.
type TimelineService interface {
	// Timeline: another tenant's job is job.ErrNotFound; the tenant may be
	// job.AllTenants (the operator).
	Timeline(ctx context.Context, tenant, id string) (*job.Timeline, error)
}

type timelines struct {
	*server
	ts TimelineService
}

// get serves the job's timeline from its persisted events.
func (rs *timelines) get(w http.ResponseWriter, r *http.Request) {
	t, err := rs.ts.Timeline(r.Context(), readScope(r.Context()), chi.URLParam(r, "id"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewTimeline(t))
}
