package api

import (
	"context"
	"io"
	"net/http"
	"time"

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
	r.Post("/{id}", rs.decide)
	return r
}

// approvalView is an approval as the API shows it.
type approvalView struct {
	*job.Approval
}

func viewApproval(a *job.Approval) approvalView {
	c := *a
	if c.Arguments == nil {
		c.Arguments = []byte("{}")
	}
	return approvalView{&c}
}

type approvalList struct {
	Approvals  []approvalView `json:"approvals"`
	NextCursor string         `json:"next_cursor"`
}

// decisionBody is the JSON body of POST /v1/approvals/{id}.
type decisionBody struct {
	Decision string `json:"decision"` // approve | deny
	Reason   string `json:"reason"`
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

// guardView is the guard's decision as the API shows it on a job.
type guardView struct {
	Outcome   string          `json:"outcome"`
	Code      string          `json:"code,omitempty"`
	Rule      string          `json:"rule"`
	Reason    string          `json:"reason,omitempty"`
	Remaining []remainingView `json:"remaining"`
	Refunded  bool            `json:"refunded"`
	DecidedAt time.Time       `json:"decided_at"`
	// RetryAt and RetryAfterMS say when a refused call may pass on a
	// retry (rate_limited, budget_exhausted).
	RetryAt      *time.Time `json:"retry_at,omitempty"`
	RetryAfterMS int64      `json:"retry_after_ms,omitempty"`
	// ApprovalID is the approval a pending call waits for.
	ApprovalID string `json:"approval_id,omitempty"`
}

type remainingView struct {
	Rule      string     `json:"rule"`
	Effect    string     `json:"effect,omitempty"`
	Tool      string     `json:"tool,omitempty"`
	Scope     string     `json:"scope"`
	Limit     int64      `json:"limit"`
	Remaining int64      `json:"remaining"`
	ResetsAt  *time.Time `json:"resets_at,omitempty"`
}

func viewGuard(g *job.GuardRecord) *guardView {
	if g == nil {
		return nil
	}
	v := &guardView{Outcome: string(g.Outcome), Code: g.Code, Rule: g.Rule, Reason: g.Reason,
		Refunded: g.Refunded, DecidedAt: g.DecidedAt, Remaining: make([]remainingView, 0, len(g.Remaining)),
		RetryAt: g.RetryAt, ApprovalID: g.ApprovalID}
	if g.RetryAt != nil {
		v.RetryAfterMS = max(1, g.RetryAt.Sub(g.DecidedAt).Milliseconds())
	}
	for _, r := range g.Remaining {
		rv := remainingView{Rule: r.Rule, Effect: string(r.Effect), Tool: r.Tool, Scope: r.Scope, Limit: r.Limit, Remaining: r.Remaining}
		if !r.ResetsAt.IsZero() {
			t := r.ResetsAt
			rv.ResetsAt = &t
		}
		v.Remaining = append(v.Remaining, rv)
	}
	return v
}
