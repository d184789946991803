package job

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Config configures a Service. Zero fields take the documented defaults.
type Config struct {
	// Workers is how many jobs run at once. Default 16.
	Workers int
	// QueueSize bounds the jobs accepted but not yet started; a Submit
	// beyond it is ErrQueueFull. Default 1024.
	QueueSize int
	// Ceilings are the operator's maximum limits; a request asking for
	// more is ErrInvalid. A zero field has no ceiling.
	Ceilings runner.Limits
	// Defaults apply to limits a request leaves zero. A zero default with a
	// non-zero ceiling takes the ceiling, so a job never runs above it.
	// Defaults.Timeout defaults to 60s (or the timeout ceiling if lower):
	// in-process tools have no runner default to fall back on.
	Defaults runner.Limits
	// WorkDir holds the job workspaces (WorkDir/<job-id>, removed when the
	// job ends). Default $TMPDIR/sandboxd/work. Created if missing.
	WorkDir string
	// HTTP is passed to in-process tools (http_request). Its Guard is
	// replaced by the tenant's (see Service.httpOptions) for a tenant with
	// a policy, and defaults to public addresses minus Protected.
	HTTP *tools.HTTPOptions
	// Images lists, per tenant, the images its sessions may name besides
	// the runner's default image (which every tenant may use: its one-shot
	// jobs run there anyway). A tenant not listed may name only the
	// default. Entries are checked and canonicalised with the runner's
	// runner.ImageNamer at New; anything else a session asks for is
	// ErrInvalid, before any runner call.
	Images map[string][]string
	// Protected are sandboxd's own addresses (listeners, dependencies):
	// http_request never reaches them, whatever a tenant's policy says.
	// The egress proxy is given the same set. nil: none.
	Protected *netclass.Protected
	// RunnerName is recorded on jobs of sandboxed tools and used as the
	// runner metric label. Default: the runner's Name(). In-process tools
	// record "inprocess".
	RunnerName string
	// Logger receives lifecycle logs. Default: discard.
	Logger *slog.Logger
	// Metrics, when nil, are created unregistered.
	Metrics *Metrics
	// Retention bounds what the store keeps of finished jobs.
	Retention RetentionConfig
	// Sessions configures persistent sandboxes (see CreateSession).
	Sessions SessionConfig
	// Pool configures the warm sandbox pool of one-shot jobs.
	Pool PoolConfig

	// Guard decides every call of a tenant that has a policy (see
	// guard.go); nil: every call is allowed.
	Guard *policy.Guard
	// Policies are the tenants' policies: approval timeouts and webhooks.
	Policies map[string]policy.TenantPolicy
	// ApprovalSweep is how often approvals past their time are expired.
	// Default 1s.
	ApprovalSweep time.Duration
	// GuardLookback is how far back the guard's spends are restored at
	// Start. Default: the longest budget window of Policies, and at least
	// Sessions.MaxTTL (per-session tool limits).
	GuardLookback time.Duration
	// WebhookClient delivers approval webhooks. Default: a client with a
	// 10s timeout. WebhookBackoff is the first retry delay (doubling).
	// Default 1s.
	WebhookClient  *http.Client
	WebhookBackoff time.Duration
	// Egress gives the sandboxes of tools with the http effect their only
	// way out; nil: such sandboxes are refused (internal error).
	Egress EgressProvider

	// Retries is how many more attempts a job submitted with Retry gets
	// after an infrastructure failure (see retry.go). Default 2; negative:
	// none. RetryBackoff is the delay before the first retry, doubling
	// (at most 5s). Default 100ms.
	Retries      int
	RetryBackoff time.Duration
}

// EgressProvider makes the egress endpoint of one sandbox (package egress
// implements it, bound to the tenant's allowlist). record receives every
// decision on the sandbox's connections.
type EgressProvider interface {
	For(tenant, session string, record func(EgressRecord)) runner.Egress
}

// SessionConfig configures sessions. Zero fields take the defaults.
type SessionConfig struct {
	// MaxPerTenant bounds a tenant's open sessions. Default 10.
	MaxPerTenant int
	// DefaultTTL is a session's lifetime when the request gives none.
	// Default 1h. MaxTTL caps what a request may ask. Default 24h.
	DefaultTTL, MaxTTL time.Duration
	// DefaultIdle closes a session unused for that long when the request
	// gives no idle timeout. Default 10m.
	DefaultIdle time.Duration
	// ReapInterval is how often expired and idle sessions are closed.
	// Default 5s.
	ReapInterval time.Duration
	// MaxFileBytes caps one uploaded file (PUT). Default 64 MiB.
	MaxFileBytes int64
	// MaxArchiveBytes caps an uploaded archive, both as sent and the
	// total size of its files once unpacked. Default 256 MiB.
	MaxArchiveBytes int64
	// MaxArchiveEntries caps the entries of an uploaded archive. Default
	// 10000.
	MaxArchiveEntries int
	// FileUID and FileGID own the files uploaded into a workspace when the
	// daemon runs as root, so the sandbox user can change them. Default
	// 65534 (nobody); -1 leaves the daemon's owner.
	FileUID, FileGID int
}

// PoolConfig configures the warm pool.
type PoolConfig struct {
	// Size is how many ready sandboxes are kept per pooled key. 0 (the
	// default here; the daemon's config defaults to 2) disables the pool.
	Size int
	// MaxSandboxes caps the sandboxes alive at once (sessions, pooled and
	// in use); the pool does not refill and sessions are refused past it.
	// Default 64.
	MaxSandboxes int
}

// RunnerInProcess is the Job.Runner of tools that run inside the daemon.
const RunnerInProcess = "inprocess"

const defaultTimeout = 60 * time.Second

func (c Config) withDefaults(r runner.Runner) (Config, error) {
	if c.Workers == 0 {
		c.Workers = 16
	}
	if c.Workers < 0 {
		return c, fmt.Errorf("config: workers %d must be positive", c.Workers)
	}
	if c.QueueSize == 0 {
		c.QueueSize = 1024
	}
	if c.QueueSize < 0 {
		return c, fmt.Errorf("config: queue size %d must be positive", c.QueueSize)
	}
	if err := c.Retention.withDefaults(); err != nil {
		return c, err
	}
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(os.TempDir(), "sandboxd", "work")
	}
	if c.RunnerName == "" && r != nil {
		c.RunnerName = r.Name()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Defaults.Timeout == 0 {
		c.Defaults.Timeout = defaultTimeout
		if c.Ceilings.Timeout > 0 && c.Ceilings.Timeout < defaultTimeout {
			c.Defaults.Timeout = c.Ceilings.Timeout
		}
	}
	if err := c.Sessions.withDefaults(); err != nil {
		return c, err
	}
	if c.ApprovalSweep == 0 {
		c.ApprovalSweep = time.Second
	}
	if c.WebhookClient == nil {
		c.WebhookClient = &http.Client{Timeout: 10 * time.Second}
	}
	if c.WebhookBackoff == 0 {
		c.WebhookBackoff = time.Second
	}
	if c.GuardLookback == 0 {
		c.GuardLookback = c.Sessions.MaxTTL
		for _, p := range c.Policies {
			for _, b := range p.Budgets {
				c.GuardLookback = max(c.GuardLookback, time.Duration(b.Per))
			}
		}
	}
	if c.Retries == 0 {
		c.Retries = 2
	}
	if c.Retries < 0 {
		c.Retries = 0
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.Pool.Size < 0 {
		return c, fmt.Errorf("config: pool size %d must not be negative", c.Pool.Size)
	}
	if c.Pool.MaxSandboxes == 0 {
		c.Pool.MaxSandboxes = 64
	}
	if c.Pool.MaxSandboxes < 0 {
		return c, fmt.Errorf("config: max sandboxes %d must be positive", c.Pool.MaxSandboxes)
	}
	for _, f := range limitFields(&c.Defaults, &c.Ceilings) {
		if *f.req < 0 || *f.ceil < 0 {
			return c, fmt.Errorf("config: negative %s", f.name)
		}
		if *f.ceil > 0 && *f.req > *f.ceil {
			return c, fmt.Errorf("config: default %s %d exceeds the ceiling %d", f.name, *f.req, *f.ceil)
		}
	}
	return c, nil
}

// limitField pairs one field of a requested (or default) Limits with the
// same field of the ceilings. Durations are compared as int64 nanoseconds.
type limitField struct {
	name      string
	req, ceil *int64
}

func limitFields(req, ceil *runner.Limits) []limitField {
	return []limitField{
		{"memory_bytes", &req.MemoryBytes, &ceil.MemoryBytes},
		{"pids", &req.PIDs, &ceil.PIDs},
		{"cpu_millis", &req.CPUMillis, &ceil.CPUMillis},
		{"timeout", (*int64)(&req.Timeout), (*int64)(&ceil.Timeout)},
		{"output_bytes", &req.OutputBytes, &ceil.OutputBytes},
		{"nofile", &req.NoFile, &ceil.NoFile},
		{"file_size_bytes", &req.FileSize, &ceil.FileSize},
	}
}

// effectiveLimits checks a request's limits against the ceilings and fills
// the zero fields: request, else default, else ceiling, else zero (the
// runner's default).
func (c *Config) effectiveLimits(req runner.Limits) (runner.Limits, error) {
	out := req
	ceil := c.Ceilings
	def := c.Defaults
	fields := limitFields(&out, &ceil)
	defs := limitFields(&def, &def)
	for i, f := range fields {
		v := *f.req
		if v < 0 {
			return runner.Limits{}, fmt.Errorf("%w: limits.%s %s is negative", ErrInvalid, f.name, fmtLimit(f.name, v))
		}
		if *f.ceil > 0 && v > *f.ceil {
			return runner.Limits{}, fmt.Errorf("%w: limits.%s %s exceeds the ceiling %s",
				ErrInvalid, f.name, fmtLimit(f.name, v), fmtLimit(f.name, *f.ceil))
		}
		if v == 0 {
			v = *defs[i].req
		}
		if v == 0 {
			v = *f.ceil
		}
		*f.req = v
	}
	return out, nil
}

func fmtLimit(name string, v int64) string {
	if name == "timeout" {
		return time.Duration(v).String()
	}
	return fmt.Sprint(v)
}

func (c *SessionConfig) withDefaults() error {
	def := func(v *time.Duration, d time.Duration, name string) error {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			return fmt.Errorf("config: sessions %s %s must not be negative", name, *v)
		}
		return nil
	}
	for _, f := range []struct {
		v    *time.Duration
		d    time.Duration
		name string
	}{
		{&c.DefaultTTL, time.Hour, "default_ttl"}, {&c.MaxTTL, 24 * time.Hour, "max_ttl"},
		{&c.DefaultIdle, 10 * time.Minute, "default_idle"}, {&c.ReapInterval, 5 * time.Second, "reap_interval"},
	} {
		if err := def(f.v, f.d, f.name); err != nil {
			return err
		}
	}
	if c.DefaultTTL > c.MaxTTL {
		return fmt.Errorf("config: sessions default_ttl %s exceeds max_ttl %s", c.DefaultTTL, c.MaxTTL)
	}
	if c.MaxPerTenant == 0 {
		c.MaxPerTenant = 10
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = 64 << 20
	}
	if c.MaxArchiveBytes == 0 {
		c.MaxArchiveBytes = 256 << 20
	}
	if c.MaxArchiveEntries == 0 {
		c.MaxArchiveEntries = 10000
	}
	if c.MaxPerTenant < 0 || c.MaxFileBytes < 0 || c.MaxArchiveBytes < 0 || c.MaxArchiveEntries < 0 {
		return fmt.Errorf("config: sessions limits must not be negative")
	}
	if c.FileUID == 0 {
		c.FileUID = 65534
	}
	if c.FileGID == 0 {
		c.FileGID = 65534
	}
	return nil
}

// toolDefaults fills the limits a request leaves zero with the tool's own
// (tools.Tool.Limits), held to the ceilings: a tool file may ask for less
// or more than the operator's defaults, never more than the ceilings.
func toolDefaults(req runner.Limits, tl tools.Limits, ceil runner.Limits) runner.Limits {
	pick := func(r *int64, t, c int64) {
		if *r == 0 && t > 0 {
			*r = t
			if c > 0 && t > c {
				*r = c
			}
		}
	}
	pick(&req.MemoryBytes, tl.MemoryBytes, ceil.MemoryBytes)
	pick(&req.PIDs, tl.PIDs, ceil.PIDs)
	pick(&req.CPUMillis, tl.CPUMillis, ceil.CPUMillis)
	pick((*int64)(&req.Timeout), int64(tl.Timeout), int64(ceil.Timeout))
	pick(&req.OutputBytes, tl.OutputBytes, ceil.OutputBytes)
	return req
}
