package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/store"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
	"github.com/sandboxd/sandboxd/tools/custom"
	"github.com/sandboxd/sandboxd/tools/provider"
)

var (
	_ api.JobService      = (*job.Service)(nil)
	_ api.SessionService  = (*job.Service)(nil)
	_ api.ApprovalService = (*job.Service)(nil)
)

// longPollGrace is how long Shutdown lets in-flight requests end on their
// own before the long polls (?wait, SSE) are released.
const longPollGrace = 2 * time.Second

// serve wires the store, tools, runner, job service and API, serves until
// ctx ends, then shuts down: the HTTP server first (no new jobs), then the
// job service (running jobs get the rest of ShutdownTimeout).
func serve(ctx context.Context, cfg *Config, log *slog.Logger) error {
	dataDir := cfg.DataDir
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	st, err := store.Open(filepath.Join(dataDir, "sandboxd.db"))
	if err != nil {
		return err
	}
	defer st.Close()

	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{}); err != nil {
		return err
	}
	if err := markIdempotent(reg, cfg.Tools.Idempotent); err != nil {
		return err
	}
	defaults, ceilings := cfg.EffectiveLimits()
	r, closeRunner, err := newRunner(ctx, cfg, defaults.runner(), log.With("component", "runner"))
	if err != nil {
		return err
	}
	defer closeRunner()

	promReg := prometheus.NewRegistry()
	promReg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	policies := cfg.Policies()
	guard, err := policy.NewGuard(policies, policy.GuardOptions{Registerer: promReg})
	if err != nil {
		return err
	}
	protected := protectedAddrs(ctx, cfg, r, log)
	proxy, err := egress.New(egress.Options{Registerer: promReg, Logger: log.With("component", "egress"),
		Protected: protected})
	if err != nil {
		return err
	}
	svc, err := job.New(job.Config{
		Guard:     guard,
		Policies:  policies,
		Egress:    newEgressProvider(proxy, policies, cfg.providerEgress()),
		Workers:   cfg.Queue.Workers,
		QueueSize: cfg.Queue.Size,
		Ceilings:  ceilings.runner(),
		Defaults:  defaults.runner(),
		WorkDir:   filepath.Join(dataDir, "workspaces"),
		HTTP: &tools.HTTPOptions{
			MaxResponseBytes: cfg.HTTPRequest.MaxResponseBytes,
			Timeout:          time.Duration(cfg.HTTPRequest.Timeout),
		},
		Protected:  protected,
		Images:     cfg.TenantImages(),
		RunnerName: cfg.Runner.Name,
		Sessions: job.SessionConfig{
			MaxPerTenant: cfg.Sessions.MaxPerTenant,
			DefaultTTL:   time.Duration(cfg.Sessions.DefaultTTL), MaxTTL: time.Duration(cfg.Sessions.MaxTTL),
			DefaultIdle:       time.Duration(cfg.Sessions.DefaultIdle),
			ReapInterval:      time.Duration(cfg.Sessions.ReapInterval),
			MaxFileBytes:      cfg.Sessions.MaxFileBytes,
			MaxArchiveBytes:   cfg.Sessions.MaxArchiveBytes,
			MaxArchiveEntries: cfg.Sessions.MaxArchiveEntries,
		},
		Pool:         job.PoolConfig{Size: cfg.EffectivePoolSize(), MaxSandboxes: cfg.Pool.MaxSandboxes},
		Retention:    cfg.Retention.job(),
		Logger:       log.With("component", "job"),
		Metrics:      job.NewMetrics(promReg),
		Retries:      cfg.Turns.Retries,
		RetryBackoff: time.Duration(cfg.Turns.RetryBackoff),
	}, st, reg, r)
	if err != nil {
		return err
	}
	// Tools without Go code load before Start, so that their sandboxed
	// tools get warm pool sandboxes like the built-ins.
	sources := &toolSources{}
	if cfg.ToolsDir != "" {
		sources.dir = custom.NewDirectory(custom.Options{Dir: cfg.ToolsDir, Registry: reg, Replace: cfg.Tools.ReplaceBuiltins,
			Sandbox: svc, Logger: log.With("component", "tools")})
		if _, err := sources.dir.Reload(ctx); err != nil {
			return err
		}
	}
	reloadOnHUP(ctx, sources.dir, log)
	sources.prov, err = provider.NewManager(cfg.providerConfigs(), provider.Options{Registry: reg,
		Launcher: launcher{svc: svc, log: log.With("component", "provider")}, Protected: protected,
		Logger: log.With("component", "provider"), Version: versionString()})
	if err != nil {
		return err
	}
	defer sources.prov.Stop() // before the runner closes
	promReg.MustRegister(sources.prov.Collector())
	if err := svc.Start(ctx); err != nil {
		return err
	}
	sources.prov.Start()
	turns := job.NewTurns(svc, job.TurnConfig{Concurrency: cfg.Turns.Concurrency, Keep: time.Duration(cfg.Turns.Keep)})

	handler := api.New(svc, api.Options{
		Keys:         cfg.APIKeys(),
		MaxBodyBytes: cfg.API.MaxBodyBytes,
		MaxWait:      time.Duration(cfg.API.MaxWait),
		Gatherer:     promReg,
		Registerer:   promReg,
		Logger:       log.With("component", "api"),
		Version:      versionString(),
		Turns:        turns,
		Tools:        sources,
		AdminTenants: cfg.Admin.Tenants,
	})
	return listenAndServe(ctx, cfg, log, handler, svc, protected)
}

// shutdowner is the part of the job service the shutdown sequence needs.
type shutdowner interface {
	Shutdown(ctx context.Context) error
}

// listenAndServe serves h on cfg.Addr; the listener's address joins
// protected (its real port, also when cfg.Addr asks for port 0).
func listenAndServe(ctx context.Context, cfg *Config, log *slog.Logger, h http.Handler, svc shutdowner, protected *netclass.Protected) error {
	// Requests run on baseCtx, cancelled during shutdown so that long polls
	// answer with the current job and event streams end.
	baseCtx, releaseLongPolls := context.WithCancel(context.WithoutCancel(ctx))
	defer releaseLongPolls()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // headers and body; no WriteTimeout: waits and SSE are long
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = svc.Shutdown(context.WithoutCancel(ctx))
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	protected.AddListener("API", ln.Addr())
	log.Debug("addresses no tenant's traffic may reach", "protected", protected.String())
	auth := "none (single tenant \"default\", loopback only)"
	if n := len(cfg.APIKeys()); n > 0 {
		auth = fmt.Sprintf("%d API keys, %d tenants", n, len(cfg.Tenants))
	}
	log.Info("sandboxd listening", "addr", ln.Addr().String(), "data_dir", cfg.DataDir,
		"runner", cfg.Runner.Name, "auth", auth, "version", versionString())

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	var failed error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", time.Duration(cfg.ShutdownTimeout))
	case err := <-serveErr:
		failed = fmt.Errorf("http server: %w", err)
	}

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Duration(cfg.ShutdownTimeout))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(sctx) }()
	var herr error
	select {
	case herr = <-done:
	case <-time.After(longPollGrace):
		releaseLongPolls()
		herr = <-done
	}
	if herr != nil {
		_ = srv.Close()
		log.Warn("http shutdown incomplete", "err", herr)
	}
	if err := svc.Shutdown(sctx); err != nil {
		log.Warn("job service shutdown", "err", err)
	}
	log.Info("sandboxd stopped")
	if failed != nil && !errors.Is(failed, http.ErrServerClosed) {
		return failed
	}
	return nil
}

// job maps the daemon's retention keys (0: no bound) onto the job
// service's (0: its default, negative: no bound).
func (r RetentionConfig) job() job.RetentionConfig {
	off := func(v int64) int64 {
		if v == 0 {
			return -1
		}
		return v
	}
	return job.RetentionConfig{MaxAge: time.Duration(off(int64(r.MaxAge))), MaxBytes: off(r.MaxBytes),
		Interval: time.Duration(r.Interval)}
}

func (l LimitValues) runner() runner.Limits {
	return runner.Limits{
		MemoryBytes: l.MemoryBytes, PIDs: l.PIDs, CPUMillis: l.CPUMillis,
		Timeout: time.Duration(l.Timeout), OutputBytes: l.OutputBytes,
		NoFile: l.NoFile, FileSize: l.FileSizeBytes,
	}
}
