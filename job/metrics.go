package job

import "github.com/prometheus/client_golang/prometheus"

// Outcomes, the values of the outcome label of sandboxd_jobs_total:
//
//	ok          succeeded: the tool ran and its Result is OK
//	tool_error  failed/tool_error: the tool ran and reported a failure
//	timeout     failed/timeout: the tool ran past its time limit
//	cancelled   cancelled by a client
//	error       failed/internal or failed/shutdown: no usable tool result
//	lost        failed/lost: the daemon died while the job ran
const (
	OutcomeOK        = "ok"
	OutcomeToolError = "tool_error"
	OutcomeTimeout   = "timeout"
	OutcomeCancelled = "cancelled"
	OutcomeError     = "error"
	OutcomeLost      = "lost"
	// OutcomeRefused: the guard stopped the call (a deny rule, a spent
	// budget, a usage or rate limit, an approval denied or expired).
	OutcomeRefused = "refused"
)

// Metrics are the job service's Prometheus collectors. They are written by
// the service and never read back for control flow.
type Metrics struct {
	jobs           *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	effects        *prometheus.CounterVec
	queueDepth     prometheus.Gauge
	queueRejected  prometheus.Counter
	sandboxesAlive prometheus.Gauge
	inFlight       prometheus.Gauge
	sessionsActive *prometheus.GaugeVec
	sessionsClosed *prometheus.CounterVec
	poolReady      *prometheus.GaugeVec
	poolHits       prometheus.Counter
	poolMisses     prometheus.Counter
	webhooks       *prometheus.CounterVec
	callbacks      *prometheus.CounterVec
	// retries counts infrastructure failures by tool and what was done
	// (retried, not_retried: the call may have started and its tool is
	// not retry-safe, exhausted: no retries left).
	retries *prometheus.CounterVec
	// cache counts result cache lookups by tool and result (hit, miss);
	// cacheEntries is the results it holds.
	cache        *prometheus.CounterVec
	cacheEntries prometheus.Gauge
	// reg receives collectors made later by the service (pending
	// approvals); nil: none registered.
	reg prometheus.Registerer
}

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered). Registering twice with the same registry panics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_jobs_total",
			Help: "Jobs that reached a terminal state, by tenant, tool, runner and outcome (ok, tool_error, timeout, cancelled, error, lost, refused).",
		}, []string{"tenant", "tool", "runner", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sandboxd_job_duration_seconds",
			Help: "Wall time of jobs from start to finish, by tenant, tool and runner.",
			Buckets: []float64{
				0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
				0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
			},
		}, []string{"tenant", "tool", "runner"}),
		effects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_effects_spent_total",
			Help: "Effects spent by tool calls that ran, by tenant, tool and effect.",
		}, []string{"tenant", "tool", "effect"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandboxd_queue_depth",
			Help: "Jobs accepted and waiting for a worker.",
		}),
		queueRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandboxd_queue_rejected_total",
			Help: "Submissions rejected because the job queue was full.",
		}),
		sandboxesAlive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandboxd_sandboxes_alive",
			Help: "Sandboxes created by the job service and not yet closed.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sandboxd_jobs_in_flight",
			Help: "Jobs currently running.",
		}),
		sessionsActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandboxd_sessions_active",
			Help: "Sessions being created or active, by tenant.",
		}, []string{"tenant"}),
		sessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sandboxd_sessions_closed_total",
			Help: "Sessions closed, by reason (deleted, expired, idle, lost, shutdown, create_failed).",
		}, []string{"reason"}),
		poolReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sandboxd_pool_ready",
			Help: "Pre-created sandboxes ready in the warm pool, by image (\"default\" for the runner's default).",
		}, []string{"image"}),
		poolHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandboxd_pool_hits_total",
			Help: "One-shot jobs of a pooled profile that took a ready sandbox.",
		}),
		poolMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sandboxd_pool_misses_total",
			Help: "One-shot jobs of a pooled profile that found no ready sandbox and created one.",
		}),
	}
	m.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_approval_webhooks_total",
		Help: "Approval webhook deliveries by outcome (delivered, failed after retries).",
	}, []string{"outcome"})
	m.callbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_callback_deliveries_total",
		Help: "Completion callback delivery attempts by tenant and outcome (delivered, failed: retried until callbacks.attempts, refused: the address guard refused the URL's address).",
	}, []string{"tenant", "outcome"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_job_infrastructure_failures_total",
		Help: "Infrastructure failures of job attempts (runner unavailable, sandbox died, provider down, the process or replica running it died), by tool and action (retried, not_retried, exhausted).",
	}, []string{"tool", "action"})
	m.cache = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxd_tool_cache_total",
		Help: "Result cache lookups of cacheable tools' calls, by tool and result (hit: answered without running, no budget spent; miss: ran).",
	}, []string{"tool", "result"})
	m.cacheEntries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sandboxd_tool_cache_entries",
		Help: "Results held by the result cache (bounded by tools.cache.max_entries).",
	})
	m.reg = reg
	if reg != nil {
		reg.MustRegister(m.webhooks, m.callbacks, m.retries, m.cache, m.cacheEntries)
		reg.MustRegister(m.jobs, m.duration, m.effects, m.queueDepth, m.queueRejected, m.sandboxesAlive, m.inFlight,
			m.sessionsActive, m.sessionsClosed, m.poolReady, m.poolHits, m.poolMisses)
	}
	return m
}

// outcome maps a terminal job to its outcome label.
func outcome(j *Job) string {
	switch {
	case j.State == StateSucceeded:
		return OutcomeOK
	case j.State == StateCancelled:
		return OutcomeCancelled
	case j.Reason == ReasonToolError:
		return OutcomeToolError
	case j.Reason == ReasonTimeout:
		return OutcomeTimeout
	case j.Reason == ReasonLost:
		return OutcomeLost
	case j.Reason == ReasonDenied, j.Reason == ReasonBudgetExhausted, j.Reason == ReasonUsageLimit,
		j.Reason == ReasonRateLimited, j.Reason == ReasonApprovalDenied, j.Reason == ReasonApprovalExpired:
		return OutcomeRefused
	default:
		return OutcomeError
	}
}
