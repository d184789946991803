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
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/api"
	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/internal/history"
	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/mcpserver"
	"github.com/sandboxd/sandboxd/policy"
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
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	dataDir := cfg.DataDir
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	// Before anything reads or changes the data dir: a second process on
	// it would run crash recovery against the live one's jobs.
	unlock, err := lockDataDir(dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	ctx, stopServing := context.WithCancelCause(ctx)
	defer stopServing(nil)
	st, err := openStore(ctx, cfg.Store, dataDir, log, stopServing)
	if err != nil {
		return err
	}
	defer st.Close()

	lim := cfg.Limits.Effective()
	reg := tools.NewRegistry()
	if err := builtin.Register(reg, builtin.Options{DefaultExecTimeout: lim.Defaults.Timeout, MaxExecTimeout: lim.Ceilings.Timeout}); err != nil {
		return err
	}
	if err := registerWebSearch(reg, cfg.Tools.WebSearch); err != nil {
		return err
	}
	// Every sandbox's workspace is its own filesystem (limits.disk_bytes,
	// disk_inodes); a daemon that cannot make them does not start. Not
	// with the kubernetes runner: there the sandbox's workspace is its
	// pod's emptyDir of the disk limit (runner/kubernetes), and sandboxd's
	// copy a plain staging directory, so that sandboxd runs in a pod
	// without root, loop devices or mounts (deploy/kubernetes).
	plain := cfg.Runner.Name == "kubernetes"
	if plain {
		log.Info("kubernetes runner: sandboxd's workspace copies are plain directories; the disk bound is each pod's emptyDir sizeLimit")
	}
	workspaces, err := workspace.New(workspace.Options{Root: filepath.Join(dataDir, "workspaces"), Plain: plain,
		Logger: log.With("component", "workspace")})
	if err != nil {
		return err
	}
	warnDiskOvercommit(log, dataDir, cfg.Pool.MaxSandboxes, lim.Defaults.DiskBytes)
	if err := markIdempotent(reg, cfg.Tools.Idempotent); err != nil {
		return err
	}
	if err := markReturnDirect(reg, cfg.Tools.ReturnDirect); err != nil {
		return err
	}
	// The job service resolves every limit of every sandbox it asks for
	// (config.Limits.Resolve: up to the ceilings). The runners' own Config.
	// Defaults fill zero fields and, on the container runners, clip larger
	// ones: they get the ceilings, else a request above a default (and
	// below its ceiling) would be clipped to the default.
	r, closeRunner, err := newRunner(ctx, cfg, lim.Ceilings, log.With("component", "runner"))
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
		Queue:       cfg.Queue,
		Shares:      cfg.TenantShares(),
		Tenants:     len(cfg.Tenants),
		Limits:      lim,
		Sessions:    cfg.Sessions,
		Pool:        cfg.Pool,
		HTTPRequest: cfg.HTTPRequest,
		Retention:   cfg.Retention,
		Protected:   protected,
		Images:      cfg.TenantImages(),
		Guard:       guard,
		Policies:    policies,
		Egress:      newEgressProvider(proxy, policies, cfg.ProviderEgress()),
		Workspaces:  workspaces,
		RunnerName:  cfg.Runner.Name,
		Replica:     replicaConfig(cfg, stopServing),
		Logger:      log.With("component", "job"),
		Metrics:     job.NewMetrics(promReg),
		// Completion callbacks: signed per tenant, dialled through the
		// same address guard as egress (callbacks.allow_private_cidrs,
		// never sandboxd's own addresses), the body the API's job shape.
		Callbacks:       cfg.Callbacks,
		CallbackSecrets: cfg.CallbackSecrets(),
		CallbackPrivate: cfg.CallbackPrefixes(),
		CallbackBody:    api.CallbackBody,
		// A turn's callback: the batch as GET /v1/tool-calls/{id} shows it.
		TurnCallbackBody: api.TurnCallbackBody,
		Turns:            cfg.Turns,
		Labels:           cfg.Labels,
		Cache:            cfg.Tools.Cache,
		Hooks:            cfg.Hooks,
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
	sources.prov, err = provider.NewManager(providerConfigs(cfg), provider.Options{Registry: reg,
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
	turns := job.NewTurns(svc, job.TurnConfig{})
	if err := turns.Recover(ctx); err != nil {
		return err
	}

	// The console's overview charts: this process's metrics, sampled
	// into bounded rings in memory (internal/history).
	hist := history.New(promReg, history.Options{Interval: cfg.Console.SampleInterval, MaxSeries: cfg.Console.MaxSeries})
	histCtx, stopHistory := context.WithCancel(ctx)
	defer stopHistory()
	go hist.Run(histCtx)

	// MCP (Streamable HTTP at /mcp, and stdio for `sandboxd mcp`): every
	// call a job of this service; an MCP session's sandboxd session idles
	// out like any other's.
	// With several replicas, a request for a session, job or MCP session
	// another replica holds is forwarded there (api/forward.go).
	cluster, mcpPrefix := clusterOf(svc, cfg, log)
	mcpSrv := mcpserver.New(svc, mcpserver.Options{Version: versionString(),
		IdleTimeout: time.Duration(cfg.Sessions.DefaultIdle), Logger: log.With("component", "mcp"),
		SessionIDPrefix: mcpPrefix})
	defer mcpSrv.Wait() // sessions being closed as their MCP session ended, before the runner closes
	if stdio := stdioMCPFrom(ctx); stdio != nil {
		var stopServe context.CancelFunc
		ctx, stopServe = context.WithCancel(ctx)
		defer stopServe()
		go func() {
			defer stopServe() // the client closed stdin: sandboxd stops
			if err := mcpSrv.ServeStdio(ctx, stdio.tenant, stdio.in, stdio.out); err != nil {
				log.Error("MCP over stdio", "err", err)
			}
		}()
	}

	handler := api.New(svc, api.Options{
		MCP:           mcpSrv.HandlerFor,
		History:       hist,
		Keys:          cfg.APIKeys(),
		OperatorKeys:  cfg.OperatorKeys,
		API:           cfg.API,
		Dashboard:     promReg,
		Registerer:    promReg,
		Logger:        log.With("component", "api"),
		Version:       versionString(),
		Turns:         turns,
		Tools:         sources,
		Cluster:       cluster,
		ReplicaSecret: cfg.ReplicaSecret,
	})
	stopMetrics, err := serveMetrics(ctx, cfg.MetricsAddr, promReg, protected, log.With("component", "metrics"))
	if err != nil {
		_ = svc.Shutdown(context.WithoutCancel(ctx))
		return err
	}
	defer stopMetrics()
	return listenAndServe(ctx, cfg, log, handler, svc, protected)
}

// warnDiskOvercommit logs when the data directory's filesystem has less
// room than every sandbox filling a workspace of the default size: the
// images are sparse (a workspace takes what is written to it), so the
// bound of one sandbox holds, but all of them together could fill the
// disk first.
func warnDiskOvercommit(log *slog.Logger, dataDir string, sandboxes int, diskBytes int64) {
	var st unix.Statfs_t
	if unix.Statfs(dataDir, &st) != nil {
		return
	}
	free := int64(st.Bavail) * st.Bsize
	if all := int64(sandboxes) * diskBytes; all > free {
		log.Warn("the workspaces of pool.max_sandboxes sandboxes at limits.defaults.disk_bytes could take more than the data directory's free space",
			"max_sandboxes", sandboxes, "disk_bytes", diskBytes, "total", all, "free", free)
	}
}

// shutdowner is the part of the job service the shutdown sequence needs.
type shutdowner interface {
	Shutdown(ctx context.Context) error
}

// listenAndServe serves h on cfg.Addr; the listener's address joins
// protected (its real port, also when cfg.Addr asks for port 0).
func listenAndServe(ctx context.Context, cfg *config.Config, log *slog.Logger, h http.Handler, svc shutdowner, protected *netclass.Protected) error {
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
	if n := len(cfg.APIKeys()); n > 0 || len(cfg.OperatorKeys) > 0 {
		auth = fmt.Sprintf("%d API keys, %d tenants, %d operator keys", n, len(cfg.Tenants), len(cfg.OperatorKeys))
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
	if cause := context.Cause(ctx); errors.Is(cause, store.ErrOwned) || errors.Is(cause, job.ErrLeaseLost) {
		return cause
	}
	return nil
}

// closingStore is a job.Store its opener closes.
type closingStore interface {
	job.Store
	Close() error
}

// openStore opens the configured store: SQLite in the data dir (store
// empty or "sqlite") or the Postgres database of a postgres:// URL.
// lost is called when the process must stop serving (Postgres: another
// process took the database's owner lock).
func openStore(ctx context.Context, spec, dataDir string, log *slog.Logger, lost func(error)) (closingStore, error) {
	if store.IsPostgresURL(spec) {
		octx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		st, err := store.OpenPostgres(octx, spec)
		if err != nil {
			return nil, err
		}
		// Several replicas serve the database: each holds a lease
		// (job.Config.Replica), not the database.
		log.Info("store", "backend", "postgres", "url", store.RedactURL(spec))
		return st, nil
	}
	return store.Open(filepath.Join(dataDir, "sandboxd.db"))
}

// replicaConfig is the job service's replica identity with a Postgres
// store (nil with SQLite: one process, under the data dir's lock). A
// replica that loses its lease stops serving (stop with job.ErrLeaseLost).
func replicaConfig(cfg *config.Config, stop context.CancelCauseFunc) *job.ReplicaConfig {
	if !store.IsPostgresURL(cfg.Store) {
		return nil
	}
	id, addr := cfg.ReplicaID, cfg.ReplicaAddress
	if addr == "" {
		addr = cfg.Addr
	}
	if id == "" {
		host, _ := os.Hostname()
		_, port, _ := net.SplitHostPort(cfg.Addr)
		id = host + ":" + port
	}
	return &job.ReplicaConfig{ID: id, Address: addr, LeaseTTL: cfg.ReplicaLease, OnLost: func(err error) { stop(err) }}
}

// cluster is the job service as one replica of several (api.Cluster).
type cluster struct {
	*job.Service
	job.Coordinator
	id string
}

func (c cluster) Self() string { return c.id }

// clusterOf is the replica side of the API (nil on one process) and the
// prefix of this replica's MCP session IDs.
func clusterOf(svc *job.Service, cfg *config.Config, log *slog.Logger) (api.Cluster, string) {
	l, ok := svc.Replica()
	if !ok {
		return nil, ""
	}
	if cfg.ReplicaSecret == "" {
		log.Warn("replica_secret is not set: a request for a session, running job or MCP session of another replica is not forwarded to it (README: Running several replicas)")
		return nil, ""
	}
	return cluster{Service: svc, Coordinator: svc.Coordinator(), id: l.Replica}, api.MCPSessionPrefix(l.Replica)
}
