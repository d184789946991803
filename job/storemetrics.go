package job

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// storeMetrics are the collectors of the event sink, the artifacts and
// retention. Registered with Metrics.reg by New (none when nil).
type storeMetrics struct {
	eventsDropped    prometheus.Counter
	eventBatches     prometheus.Counter
	artifactsDropped prometheus.Counter
	retentionRuns    prometheus.Counter
	deletedJobs      prometheus.Counter
	deletedBytes     prometheus.Counter
	compactedBytes   prometheus.Counter
	lastRun          prometheus.Gauge
}

func newStoreMetrics() *storeMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	return &storeMetrics{
		eventsDropped: c("sandboxd_events_dropped_total",
			"Output events not persisted because the event sink's queue was full or the store refused them (live subscribers still got them)."),
		eventBatches: c("sandboxd_event_batches_total", "Batches of job events written to the store (one write each)."),
		artifactsDropped: c("sandboxd_artifacts_dropped_total",
			"Artifacts not stored: over the per-job count or byte cap, or refused by the store."),
		retentionRuns: c("sandboxd_retention_runs_total", "Retention passes run."),
		deletedJobs:   c("sandboxd_retention_deleted_jobs_total", "Finished jobs deleted by retention, with their events and artifacts."),
		deletedBytes: c("sandboxd_retention_deleted_bytes_total",
			"Bytes of data (arguments, results, event output, artifacts) the jobs deleted by retention held."),
		compactedBytes: c("sandboxd_store_compacted_bytes_total", "Free space the store gave back by compaction."),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sandboxd_retention_last_run_timestamp_seconds",
			Help: "Unix time the last retention pass ended."}),
	}
}

// register registers the collectors and the store size gauges, read from
// the store at scrape time.
func (m *storeMetrics) register(reg prometheus.Registerer, st Store) error {
	size := func(file bool) func() float64 {
		return func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			sz, err := st.Size(ctx)
			if err != nil {
				return 0
			}
			if file {
				return float64(sz.FileBytes)
			}
			return float64(sz.Bytes)
		}
	}
	for _, c := range []prometheus.Collector{
		m.eventsDropped, m.eventBatches, m.artifactsDropped, m.retentionRuns, m.deletedJobs, m.deletedBytes, m.compactedBytes, m.lastRun,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandboxd_store_bytes",
			Help: "Bytes the store's records and indexes occupy (what retention.max_bytes bounds)."}, size(false)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandboxd_store_file_bytes",
			Help: "Bytes the store occupies on disk, free space not yet compacted and the WAL included."}, size(true)),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
