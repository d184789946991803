package job

import (
	"encoding/json"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// StatePendingApproval: the guard's rule says confirm; the job waits for a
// human (POST /v1/approvals/{id}) and then is queued (approved) or fails
// with ReasonApprovalDenied or ReasonApprovalExpired.
const StatePendingApproval State = "pending_approval"

// Reasons of jobs the guard stopped. The job is failed, its Result has
// OK=false and Error says why in words the model can read.
const (
	ReasonDenied          = "denied"           // a deny rule
	ReasonBudgetExhausted = "budget_exhausted" // an effect budget is spent for this window
	ReasonUsageLimit      = "usage_limit"      // the tool's per-session call limit
	ReasonRateLimited     = "rate_limited"     // the tenant's rate limit
	ReasonApprovalDenied  = "approval_denied"
	ReasonApprovalExpired = "approval_expired"
)

// GuardRecord is the guard's decision on a job as recorded with it: who
// (the job's tenant and session), what (its tool and effects), which rule
// decided and what budget remained.
type GuardRecord struct {
	Outcome   policy.Outcome     `json:"outcome"`
	Code      string             `json:"code,omitempty"`
	Rule      string             `json:"rule"`
	Reason    string             `json:"reason,omitempty"`
	Remaining []policy.Remaining `json:"remaining,omitempty"`
	// Spend is what the decision reserved; Refunded is set when the job
	// never ran (cancelled while queued, approval denied or expired) and
	// the units went back.
	Spend     []policy.Spend `json:"spend,omitempty"`
	Refunded  bool           `json:"refunded,omitempty"`
	DecidedAt time.Time      `json:"decided_at"`
	// RetryAt is when a retry of a refused call may pass (rate_limited,
	// budget_exhausted: the decision's RetryAfter from DecidedAt); nil
	// otherwise.
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// ApprovalID is the approval a confirm decision waits for (POST
	// /v1/approvals/{id} decides it).
	ApprovalID string `json:"approval_id,omitempty"`
}

// EgressRecord is one decision of the egress proxy on a connection or
// request a job's sandbox made.
type EgressRecord struct {
	Time     time.Time `json:"time"`
	Method   string    `json:"method"`
	Host     string    `json:"host"`
	Port     int       `json:"port"`
	IP       string    `json:"ip,omitempty"`
	Allowed  bool      `json:"allowed"`
	Rule     int       `json:"rule"` // index in the tenant's egress.allow, -1 when none
	Reason   string    `json:"reason,omitempty"`
	BytesOut int64     `json:"bytes_out"`
	BytesIn  int64     `json:"bytes_in"`
}

// maxEgressRecords bounds a job's egress audit; later decisions are counted
// in metrics only.
const maxEgressRecords = 200

// ApprovalState is where an approval stands.
type ApprovalState string

const (
	ApprovalPending  ApprovalState = "pending"
	ApprovalApproved ApprovalState = "approved"
	ApprovalDenied   ApprovalState = "denied"
	ApprovalExpired  ApprovalState = "expired"
)

// Approval is a request for a human to allow one job.
type Approval struct {
	ID             string          `json:"id"`
	Tenant         string          `json:"tenant"`
	JobID          string          `json:"job_id"`
	SessionID      string          `json:"session_id,omitempty"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	Effects        []tools.Effect  `json:"effects"`
	Rule           string          `json:"rule"`
	Reason         string          `json:"reason,omitempty"`
	State          ApprovalState   `json:"state"`
	CreatedAt      time.Time       `json:"created_at"`
	ExpiresAt      time.Time       `json:"expires_at"`
	DecidedAt      *time.Time      `json:"decided_at,omitempty"`
	DecisionReason string          `json:"decision_reason,omitempty"`
}

// ApprovalFilter selects a tenant's approvals, newest first.
type ApprovalFilter struct {
	State  ApprovalState
	Limit  int
	Cursor string
}

// ApprovalDecision is a human's answer.
type ApprovalDecision struct {
	Approve bool
	Reason  string
}
