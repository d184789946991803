package job

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// approvalSet is the in-memory index of pending approvals: what the expiry
// loop scans and what the pending gauge counts (no store reads for either).
type approvalSet struct {
	mu      sync.Mutex
	pending map[string]*Approval
	tenants []string // always exported, with 0 when none pending
	desc    *prometheus.Desc
}

func newApprovalSet(tenants []string) *approvalSet {
	return &approvalSet{
		pending: make(map[string]*Approval),
		tenants: tenants,
		desc: prometheus.NewDesc("sandboxd_approvals_pending",
			"Calls waiting for a human's approval, by tenant.", []string{"tenant"}, nil),
	}
}

func (s *approvalSet) add(a *Approval) {
	c := *a
	s.mu.Lock()
	s.pending[a.ID] = &c
	s.mu.Unlock()
}

func (s *approvalSet) remove(id string) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
}

// forJob returns the pending approval of a job, if any.
func (s *approvalSet) forJob(jobID string) (*Approval, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.pending {
		if a.JobID == jobID {
			c := *a
			return &c, true
		}
	}
	return nil, false
}

// due returns the pending approvals whose time is up.
func (s *approvalSet) due(now time.Time) []*Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Approval
	for _, a := range s.pending {
		if !now.Before(a.ExpiresAt) {
			c := *a
			out = append(out, &c)
		}
	}
	return out
}

// Describe implements prometheus.Collector.
func (s *approvalSet) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *approvalSet) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	n := make(map[string]int, len(s.tenants))
	for _, t := range s.tenants {
		n[t] = 0
	}
	for _, a := range s.pending {
		n[a.Tenant]++
	}
	s.mu.Unlock()
	for t, c := range n {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, float64(c), t)
	}
}
