package job

import (
	"context"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/config"
)

// retainBatch is how many jobs one delete takes: one short write, so
// jobs' own writes interleave with a long pass.
const retainBatch = 8

// retentionDefaults completes the retention section (config.Retention: its
// defaults and docs live there): a zero Interval takes the default; a zero
// or negative MaxAge or MaxBytes is no such bound.
func retentionDefaults(c *config.Retention) error {
	if c.Interval == 0 {
		c.Interval = config.Defaults().Retention.Interval
	}
	if c.Interval < 0 {
		return fmt.Errorf("config: retention interval %s must be positive", c.Interval)
	}
	return nil
}

func (s *Service) retentionLoop() {
	t := time.NewTicker(s.cfg.Retention.Interval)
	defer t.Stop()
	for {
		s.retain()
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
	}
}

// retain runs one retention pass: jobs past MaxAge, then the earliest
// finished jobs while the store is over MaxBytes, then compaction. Jobs
// with a guard record younger than GuardLookback are kept: their spends
// restore the budgets at the next start.
func (s *Service) retain() {
	ctx, cancel := context.WithCancel(s.runCtx)
	defer cancel()
	rc := s.cfg.Retention
	now := time.Now()
	keepGuarded := now.Add(-s.cfg.GuardLookback)
	var total Deleted
	del := func(before time.Time, n int) (int, error) {
		d, err := s.st.DeleteFinishedJobs(ctx, before, keepGuarded, n)
		total.Jobs += d.Jobs
		total.Batches += d.Batches
		total.Bytes += d.Bytes
		return max(d.Jobs, d.Batches), err // a full page of either: more may be due
	}
	var err error
	if rc.MaxAge > 0 {
		for n := retainBatch; n == retainBatch && err == nil; {
			n, err = del(now.Add(-rc.MaxAge), retainBatch)
		}
	}
	if rc.MaxBytes > 0 && err == nil {
		for {
			var sz StoreSize
			if sz, err = s.st.Size(ctx); err != nil || sz.Bytes <= rc.MaxBytes {
				break
			}
			// One job at a time: the size is checked again after each, so
			// no more is deleted than needed.
			var n int
			if n, err = del(now, 1); err != nil || n == 0 {
				break
			}
		}
	}
	if err != nil && ctx.Err() == nil {
		s.log.Error("retention", "err", err)
	}
	freed, cerr := s.st.Compact(ctx)
	if cerr != nil && ctx.Err() == nil {
		s.log.Error("compact store", "err", cerr)
	}
	m := s.sm
	m.retentionRuns.Inc()
	m.deletedJobs.Add(float64(total.Jobs))
	m.deletedBytes.Add(float64(total.Bytes))
	m.compactedBytes.Add(float64(freed))
	m.lastRun.Set(float64(time.Now().UnixNano()) / 1e9)
	if total.Jobs > 0 || total.Batches > 0 || freed > 0 {
		s.log.Info("retention", "deleted_jobs", total.Jobs, "deleted_batches", total.Batches, "deleted_bytes", total.Bytes, "compacted_bytes", freed,
			"took", time.Since(now).Round(time.Millisecond))
	}
}
