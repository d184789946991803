package api

import (
	"context"
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sandboxd/sandboxd/job"
)

// ApprovalService is the optional part of the job service that serves
// /v1/approvals; New mounts those routes only when the JobService
// implements it. *job.Service does.
type ApprovalService interface {
	// The tenant of ListApprovals, GetApproval and DecideApproval may be
	// job.AllTenants: the operator's every tenant.
	ListApprovals(ctx context.Context, tenant string, f job.ApprovalFilter) ([]*job.Approval, string, error)
	// GetApproval: another tenant's approval is job.ErrNotFound.
	GetApproval(ctx context.Context, tenant, id string) (*job.Approval, error)
	// DecideApproval errors: job.ErrNotFound, job.ErrConflict (no longer
	// pending), job.ErrQueueFull (approve when the queue is full; the
	// approval stays pending), job.ErrShutdown.
	DecideApproval(ctx context.Context, tenant, id string, d job.ApprovalDecision) (*job.Approval, error)
}

// approvalScope is the tenant whose approvals the caller sees and decides:
// its own, or every tenant's (job.AllTenants) for the operator.
func approvalScope(ctx context.Context) string {
	if p := principalFrom(ctx); p.operator {
		return job.AllTenants
	}
	return tenantFrom(ctx)
}

// approvalsResource serves /v1/approvals.
type approvalsResource struct {
	*server
	as ApprovalService
}

func (rs *approvalsResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.Get("/", rs.list)
	r.Get("/{id}", rs.get)
	r.With(rs.fwd.approvalRoute(rs.as)).Post("/{id}", rs.decide)
	return r
}

func (rs *approvalsResource) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := job.ApprovalFilter{State: job.ApprovalState(q.Get("state")), Cursor: q.Get("cursor")}
	var err error
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		rs.writeError(w, r, err)
		return
	}
	list, next, err := rs.as.ListApprovals(r.Context(), approvalScope(r.Context()), f)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	out := approvalList{Approvals: make([]approvalView, 0, len(list)), NextCursor: next}
	for _, a := range list {
		out.Approvals = append(out.Approvals, viewApproval(a))
	}
	writeJSON(w, http.StatusOK, out)
}

func (rs *approvalsResource) get(w http.ResponseWriter, r *http.Request) {
	a, err := rs.as.GetApproval(r.Context(), approvalScope(r.Context()), chi.URLParam(r, "id"))
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewApproval(a))
}

const maxDecisionReason = 1000

func (rs *approvalsResource) decide(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rs.opts.MaxBodyBytes))
	if err != nil {
		rs.writeError(w, r, badRequest("reading the request body: "+err.Error()))
		return
	}
	var b decisionBody
	if err := decodeStrict(body, &b); err != nil {
		rs.writeError(w, r, err)
		return
	}
	var d job.ApprovalDecision
	switch b.Decision {
	case "approve":
		d.Approve = true
	case "deny":
	default:
		rs.writeError(w, r, badRequest(`decision must be "approve" or "deny"`))
		return
	}
	if len(b.Reason) > maxDecisionReason || !printable(b.Reason) {
		rs.writeError(w, r, badRequest("reason must be printable and at most 1000 bytes"))
		return
	}
	d.Reason = b.Reason
	a, err := rs.as.DecideApproval(r.Context(), approvalScope(r.Context()), chi.URLParam(r, "id"), d)
	if err != nil {
		rs.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewApproval(a))
}
