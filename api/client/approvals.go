package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sandboxd/sandboxd/api/wire"
)

// ApprovalListOptions select approvals; zero fields do not filter.
type ApprovalListOptions struct {
	State  string // pending, approved, denied, expired
	Limit  int
	Cursor string
}

// ListApprovals returns a page of the tenant's approvals (an operator
// key: every tenant's), newest first.
func (c *Client) ListApprovals(ctx context.Context, o ApprovalListOptions) ([]*wire.Approval, string, error) {
	q := url.Values{}
	if o.State != "" {
		q.Set("state", o.State)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	var out wire.ApprovalList
	if err := c.do(ctx, http.MethodGet, withQuery("/v1/approvals", q), nil, &out); err != nil {
		return nil, "", err
	}
	return out.Approvals, out.NextCursor, nil
}

// GetApproval returns an approval.
func (c *Client) GetApproval(ctx context.Context, id string) (*wire.Approval, error) {
	var a wire.Approval
	if err := c.do(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id), nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// DecideApproval approves or denies a pending approval, with a reason.
func (c *Client) DecideApproval(ctx context.Context, id string, approve bool, reason string) (*wire.Approval, error) {
	d := wire.Decision{Decision: "deny", Reason: reason}
	if approve {
		d.Decision = "approve"
	}
	var a wire.Approval
	if err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), d, &a); err != nil {
		return nil, err
	}
	return &a, nil
}
