package job

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Config configures a Service. The operator's sections (Queue, Limits,
// Sessions, Pool) are the daemon's configuration sections themselves
// (package config): their defaults, ceilings and docs live there, and a
// zero field takes config.Defaults(). The rest are the service's own.
type Config struct {
	// Queue: Workers jobs run at once; Size bounds the jobs accepted but
	// not yet started (a Submit beyond it is ErrQueueFull).
	Queue config.Queue
	// Shares are the tenants' weights and running caps
	// (config.TenantShares): the order of the queue (sched.go) and the
	// CPU weight of their sandboxes. Tenants is how many tenants are
	// configured, for the running cap of a tenant without its own
	// (config.Queue.TenantCap); 0 or 1: no cap below Queue.Workers.
	Shares  map[string]config.TenantShare
	Tenants int
	// Limits are the per-job (and per-session) defaults and the operator's
	// ceilings; a request asking for more than a ceiling is ErrInvalid. A
	// zero field takes the built-in value (config.Limits.Effective).
	Limits config.Limits
	// Sessions configures persistent sandboxes (see CreateSession).
	Sessions config.Sessions
	// Pool configures the warm sandbox pool of one-shot jobs; an unset
	// Pool.Size is 0 here (no pool).
	Pool config.Pool
	// HTTPRequest caps the in-process http_request tool.
	HTTPRequest config.HTTPRequest
	// FileUID and FileGID own the files uploaded into a workspace when the
	// daemon runs as root, so the sandbox user can change them. Default
	// 65534 (nobody); -1 leaves the daemon's owner.
	FileUID, FileGID int
	// WorkDir holds the job workspaces (WorkDir/<job-id>, removed when the
	// job ends). Default $TMPDIR/sandboxd/work, or Workspaces.Root().
	// Created if missing.
	WorkDir string
	// Workspaces makes the workspaces of sandboxes (one-shot, pooled,
	// sessions) under WorkDir, bounded by each one's DiskBytes and
	// DiskInodes limits. nil: plain directories without a disk bound (unit
	// tests with fake runners); the daemon passes a Manager that gives each
	// workspace its own filesystem. Its Root must be WorkDir.
	Workspaces *workspace.Manager
	// HTTP, when set, replaces the http_request options made from
	// HTTPRequest (tests that talk to their own loopback servers). Its
	// Guard is replaced by the tenant's (see Service.httpOptions) for a
	// tenant with a policy, and defaults to public addresses minus
	// Protected.
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
	// Replica, when set, makes the service one replica of several on a
	// store that implements Coordinator (replica.go).
	Replica *ReplicaConfig
	// Logger receives lifecycle logs. Default: discard.
	Logger *slog.Logger
	// Metrics, when nil, are created unregistered.
	Metrics *Metrics
	// Retention bounds what the store keeps of finished jobs; zero MaxAge
	// and MaxBytes: no such bound (negative too), zero Interval:
	// config.Defaults().Retention.Interval.
	Retention config.Retention

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
	// Callbacks bounds completion callback deliveries (zero fields:
	// config.Defaults().Callbacks). CallbackSecrets maps a tenant to the
	// key signing its callbacks; a tenant not in it may not give a
	// callback URL. CallbackPrivate are the private networks callback URLs
	// may reach (callbacks.allow_private_cidrs).
	Callbacks       config.Callbacks
	CallbackSecrets map[string]string
	CallbackPrivate []netip.Prefix
	// CallbackClient delivers callbacks; default: one that dials through
	// the address guard (netclass.Dialer) and follows no redirect. Tests
	// may replace it only to count; the guard is what keeps a tenant out
	// of private networks.
	CallbackClient *http.Client
	// CallbackLookup resolves callback host names for the default client;
	// nil: the system resolver (tests resolve names without DNS).
	CallbackLookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// CallbackBody encodes the POSTed body of a finished job; default
	// DefaultCallbackBody (the daemon gives the API's job shape).
	CallbackBody func(*Job) ([]byte, error)
	// TurnCallbackBody encodes the body of a finished turn's callback;
	// default DefaultTurnCallbackBody (the daemon gives the API's batch).
	TurnCallbackBody func(*Batch) ([]byte, error)
	// Egress gives the sandboxes of tools with the http effect their only
	// way out; nil: such sandboxes are refused (internal error).
	Egress EgressProvider
	// Hooks are the operator's tool hooks (hooks.go); a hook without its
	// own secret signs with Callbacks.Secret.
	Hooks []config.Hook
	// Cache bounds the result cache of cacheable tools (cache.go); nil
	// MaxEntries 0 disables it. Zero MaxResultBytes takes the default.
	Cache config.ToolCache
	// Labels bounds the tags and metadata of jobs, sessions and turns
	// (labels.go); zero fields take config.Defaults().Labels.
	Labels config.Labels
	// Turns configures the turn executor (turn.go) and the retries of
	// infrastructure failures of jobs submitted with Retry (retry.go):
	// Retries more attempts (0: none), the first after RetryBackoff
	// (doubling, at most 5s). Zero Concurrency, RetryBackoff and Keep take
	// config.Defaults().Turns.
	Turns config.Turns
}

// EgressProvider makes the egress endpoint of one sandbox (package egress
// implements it, bound to the tenant's allowlist). record receives every
// decision on the sandbox's connections.
type EgressProvider interface {
	For(tenant, session string, record func(EgressRecord)) runner.Egress
}

// RunnerInProcess is the Job.Runner of tools that run inside the daemon.
const RunnerInProcess = "inprocess"

func (c Config) withDefaults(r runner.Runner) (Config, error) {
	def := config.Defaults()
	for _, n := range []struct {
		name string
		v    int
	}{{"workers", c.Queue.Workers}, {"queue size", c.Queue.Size}, {"max sandboxes", c.Pool.MaxSandboxes}} {
		if n.v < 0 {
			return c, fmt.Errorf("config: %s %d must be positive", n.name, n.v)
		}
	}
	if c.Pool.Size != nil && *c.Pool.Size < 0 {
		return c, fmt.Errorf("config: pool size %d must not be negative", *c.Pool.Size)
	}
	config.Fill(&c.Queue, def.Queue)
	config.Fill(&c.Pool, config.Pool{MaxSandboxes: def.Pool.MaxSandboxes})
	config.Fill(&c.HTTPRequest, def.HTTPRequest)
	if c.HTTP == nil {
		c.HTTP = &tools.HTTPOptions{MaxResponseBytes: c.HTTPRequest.MaxResponseBytes, Timeout: c.HTTPRequest.Timeout}
	}
	if err := checkSessions(c.Sessions); err != nil {
		return c, err
	}
	config.Fill(&c.Sessions, def.Sessions)
	if c.Sessions.DefaultTTL > c.Sessions.MaxTTL {
		return c, fmt.Errorf("config: sessions default_ttl %s exceeds max_ttl %s", c.Sessions.DefaultTTL, c.Sessions.MaxTTL)
	}
	if err := c.Limits.Validate(); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	c.Limits = c.Limits.Effective()
	if c.FileUID == 0 {
		c.FileUID = 65534
	}
	if c.FileGID == 0 {
		c.FileGID = 65534
	}
	if err := retentionDefaults(&c.Retention); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.WorkDir == "" && c.Workspaces != nil {
		c.WorkDir = c.Workspaces.Root()
	}
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(os.TempDir(), "sandboxd", "work")
	}
	if c.Workspaces == nil {
		ws, err := workspace.New(workspace.Options{Root: c.WorkDir, Plain: true, Logger: c.Logger})
		if err != nil {
			return c, fmt.Errorf("config: %w", err)
		}
		c.Workspaces = ws
	}
	if wd, err := filepath.Abs(c.WorkDir); err != nil || !sameDir(wd, c.Workspaces.Root()) {
		return c, fmt.Errorf("config: WorkDir %q is not the workspaces' root %q", c.WorkDir, c.Workspaces.Root())
	}
	if c.RunnerName == "" && r != nil {
		c.RunnerName = r.Name()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
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
	config.Fill(&c.Callbacks, def.Callbacks)
	config.Fill(&c.Labels, def.Labels)
	if c.Cache.MaxResultBytes == 0 {
		c.Cache.MaxResultBytes = def.Tools.Cache.MaxResultBytes
	}
	if c.CallbackClient == nil {
		c.CallbackClient = newCallbackClient(netclass.NewGuard(c.CallbackPrivate, c.Protected), c.CallbackLookup, c.Callbacks.Timeout)
	}
	if c.CallbackBody == nil {
		c.CallbackBody = DefaultCallbackBody
	}
	if c.TurnCallbackBody == nil {
		c.TurnCallbackBody = DefaultTurnCallbackBody
	}
	if c.GuardLookback == 0 {
		c.GuardLookback = c.Sessions.MaxTTL
		for _, p := range c.Policies {
			for _, b := range p.Budgets {
				c.GuardLookback = max(c.GuardLookback, time.Duration(b.Per))
			}
		}
	}
	td := def.Turns
	td.Retries = 0 // zero is none here
	config.Fill(&c.Turns, td)
	if c.Turns.Retries < 0 {
		c.Turns.Retries = 0
	}
	return c, nil
}

// checkSessions refuses negative session settings before the zero ones
// take their defaults.
func checkSessions(ss config.Sessions) error {
	v := reflect.ValueOf(ss)
	for i := range v.NumField() {
		if v.Field(i).Int() < 0 {
			return fmt.Errorf("config: sessions %s must not be negative", v.Type().Field(i).Name)
		}
	}
	return nil
}

// effectiveLimits applies the limits rule (config.Limits.Resolve) to a
// request: up to the ceilings, the defaults for what it leaves zero.
func (c *Config) effectiveLimits(req runner.Limits) (runner.Limits, error) {
	l, err := c.Limits.Resolve(req)
	if err != nil {
		return runner.Limits{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return l, nil
}

// sameDir reports whether a and b name the same directory.
func sameDir(a, b string) bool {
	if a == b {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
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
