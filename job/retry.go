package job

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Retries of infrastructure failures (SubmitRequest.Retry). A tool failure
// (non-zero exit, exception, refused arguments, timeout) is an answer and is
// never retried. An infrastructure failure (no sandbox could be created,
// the sandbox or the provider died, the runner failed) is retried with
// exponential backoff, up to Config.Turns.Retries more attempts, when that cannot
// perform anything twice:
//
//   - the attempt provably never started (nothing ran: the sandbox could
//     not be created, the provider was down before the call reached it);
//   - or the tool is RetrySafe (nothing beyond file_read, or the operator
//     marked it idempotent).
//
// A call that may have started a write, a process or an HTTP request is
// not run again; its result says so.

// maxRetryBackoff caps the doubling delay between attempts.
const maxRetryBackoff = 5 * time.Second

// executeWithRetries runs the job's tool, and again after a retryable
// infrastructure failure. Each further attempt is counted on the job and
// recorded. The attempt returned is the last one.
func (s *Service) executeWithRetries(ctx context.Context, e *entry, j *Job, started *Job, log *slog.Logger) attempt {
	a := s.execute(ctx, e, started)
	if !e.retry {
		return a
	}
	backoff := s.cfg.Turns.RetryBackoff
	// n counts the attempts started, those of earlier processes too (a
	// call its process died running and ran again: rerunsLost).
	for n := j.Attempts; a.err != nil && ctx.Err() == nil; n++ {
		safe := !a.ran || (e.tool != nil && e.tool.RetrySafe())
		switch {
		case !safe:
			s.m.retries.WithLabelValues(j.Tool, "not_retried").Inc()
			a.err = fmt.Errorf("%w; not retried: the call may have started and %s", a.err, unsafeWhy(e))
			return a
		case n > s.cfg.Turns.Retries:
			s.m.retries.WithLabelValues(j.Tool, "exhausted").Inc()
			a.err = fmt.Errorf("%w (after %d attempts)", a.err, n)
			return a
		}
		s.m.retries.WithLabelValues(j.Tool, "retried").Inc()
		log.Info("retrying after an infrastructure failure", "attempt", n, "started", a.ran, "backoff", backoff, "err", a.err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return a
		case <-t.C:
		}
		backoff = min(backoff*2, maxRetryBackoff)
		e.mu.Lock()
		j.Attempts++
		s.storeUpdate(j)
		started = cloneJob(j)
		e.mu.Unlock()
		a = s.execute(ctx, e, started)
	}
	return a
}

// rerunsLost reports whether a job its process (or replica) died running
// runs again instead of ending failed/lost: it asked for retries, it is
// not a session's (its sandbox died with the process), its tool is
// RetrySafe (the call may have run: only one that cannot do anything
// twice runs again), and Config.Turns.Retries leaves attempts.
func (s *Service) rerunsLost(j *Job) bool {
	if !j.Retry || j.SessionID != "" || j.Attempts > s.cfg.Turns.Retries {
		return false
	}
	tool, ok := s.reg.Lookup(j.Tool)
	return ok && tool.RetrySafe()
}

// retrySafeTools names the registry's RetrySafe tools (a replica taking
// over a dead one runs their lost jobs again: Coordinator.TakeOver).
func (s *Service) retrySafeTools() []string {
	var names []string
	for _, t := range s.reg.Tools() {
		if t.RetrySafe() {
			names = append(names, t.Name)
		}
	}
	return names
}

// unsafeWhy says why the job's tool may not run twice.
func unsafeWhy(e *entry) string {
	if e.tool == nil {
		return "its tool is unknown"
	}
	var spent []string
	for _, eff := range e.tool.Effects {
		spent = append(spent, string(eff))
	}
	return fmt.Sprintf("%s may have done it already (effects %s; mark the tool idempotent to allow retries)", e.tool.Name, strings.Join(spent, ", "))
}
