package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// Service runs tool calls as jobs. Lifecycle: New, then Start (recovery,
// then workers), then any number of concurrent calls, then Shutdown. Submit
// is accepted before Start (jobs wait in the queue); after Shutdown it is
// ErrShutdown. The caller owns the Store, the Registry and the Runner and
// closes them after Shutdown returns.
//
// Terminal states. Every terminal job carries a Result, so an
// API can always hand the model something to read.
//
//	succeeded             the tool ran and its Result is OK.
//	failed/tool_error     the tool ran (or refused its arguments) and reported
//	                      a failure: non-zero exit, a signal, OOM, Run
//	                      returning an error or a Result with OK=false. The
//	                      Result is the tool's and is meaningful to the model.
//	failed/timeout        the tool ran past its time limit (Result says so).
//	failed/internal       the service could not run the tool: runner or
//	                      sandbox error, unknown tool at recovery, a panic.
//	failed/lost           the daemon died while the job ran (found at Start).
//	failed/shutdown       the daemon shut down and its grace period ended
//	                      while the job ran.
//	cancelled/cancelled   a client cancelled the job.
//
// So State alone answers "did the call work?", Reason says why not, and the
// metrics outcome label (see Outcome*) follows Reason.
type Service struct {
	cfg Config
	st  Store
	// atomic is st when it spends the guard's units with the job's
	// insert (guard_shared.go); nil: the in-memory guard.
	atomic AtomicSpender
	reg    *tools.Registry
	r      runner.Runner // nil: sandboxed tools fail with reason internal
	log    *slog.Logger
	m      *Metrics
	// cache answers identical calls of cacheable tools (cache.go); nil:
	// no cache.
	cache *resultCache
	// toolHooks are the operator's tool hooks (hooks.go).
	toolHooks []*hook
	// images are the images each tenant's sessions may name.
	images *imagePolicy
	// imageFacts caches what each image holds (ImageFacts).
	imageFacts imageFactsCache

	// Admission: a token in slots for every job waiting in the queue.
	// Submit reserves one before writing the record; a worker frees it
	// when it takes the job. sched is the queue: which job a free worker
	// takes, fair across tenants (sched.go).
	slots chan struct{}
	sched *scheduler
	// cpu caps the tenants whose sandboxed jobs run at the same time
	// (cpucap.go); nil without tenant groups.
	cpu *cpuCaps

	mu      sync.RWMutex // guards closed and started; Submit holds it shared
	closed  bool
	started bool

	emu     sync.Mutex // guards entries
	entries map[string]*entry

	// sink writes job events to the store in batches (events.go).
	sink *eventSink
	sm   *storeMetrics

	runCtx    context.Context // parent of every job's context
	runCancel context.CancelFunc
	quit      chan struct{} // closed by Shutdown: take no new jobs
	bg        sync.WaitGroup

	avgNanos atomic.Int64 // moving average of job durations (QueueRetryAfter)

	smu      sync.Mutex // guards sessions
	sessions map[string]*liveSession
	alive    atomic.Int64 // sandboxes alive: sessions, pooled and in use
	pool     *pool
	sbg      sync.WaitGroup // the session reaper
	// releases tracks one-shot sandboxes being closed after their job
	// finished: closing (docker rm, cgroup removal) is kept off the
	// job's latency, and Shutdown waits for it.
	releases sync.WaitGroup

	approvals *approvalSet   // pending approvals of this process
	hooks     sync.WaitGroup // approval webhook deliveries

	// cleanup retries the workspace removals that failed (cleanup.go).
	cleanup *cleanups

	// rep is the replica coordination (replica_run.go); nil: the only
	// process on its store.
	rep *replica
}

// entry is the in-memory side of a job that is queued, running or recently
// finished.
type entry struct {
	mu           sync.Mutex
	job          *Job // current state; written to the store under mu
	tool         *tools.Tool
	args         map[string]any // nil for recovered jobs: prepared at run time
	cancel       context.CancelFunc
	cancelReason string // ReasonCancelled or ReasonShutdown, set before cancel
	done         chan struct{}
	events       *hub
	// retry: SubmitRequest.Retry (not persisted: a recovered job runs once).
	retry bool
	// hold: SubmitRequest.Hold; released once Release queued it. decided
	// is closed when a pending_approval job leaves that state (turn.go).
	hold, released bool
	decided        chan struct{}
	// cacheKey is the call's result cache key ("" when not cacheable);
	// a success is kept for cacheTTL (cache.go).
	cacheKey string
	cacheTTL time.Duration
	// claimed: a replica claimed the job from the store (replica_run.go).
	claimed bool
}

func (e *entry) tenant() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.job.Tenant
}

// forkLooped: the job's process was killed for a fork loop (scheduler.done).
func (e *entry) forkLooped() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.job.Result
	return r != nil && r.Process != nil && r.Process.ForkLoop
}

func (e *entry) snapshot() *Job {
	e.mu.Lock()
	defer e.mu.Unlock()
	return cloneJob(e.job)
}

// New returns a stopped service. st and reg are required; r may be nil when
// only in-process tools are registered.
func New(cfg Config, st Store, reg *tools.Registry, r runner.Runner) (*Service, error) {
	if st == nil || reg == nil {
		return nil, errors.New("job.New: store and registry are required")
	}
	cfg, err := cfg.withDefaults(r)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("job.New: work dir: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		cfg: cfg, st: st, reg: reg, r: r, log: cfg.Logger, m: cfg.Metrics,
		cache:     newResultCache(cfg.Cache.MaxEntries, cfg.Cache.MaxResultBytes),
		toolHooks: newHooks(cfg.Hooks, cfg.Callbacks.Secret, cfg.Protected, cfg.CallbackLookup),
		slots:     make(chan struct{}, cfg.Queue.Size),
		sched:     newScheduler(cfg.Queue.TenantCap(cfg.Tenants), cfg.Shares),
		entries:   make(map[string]*entry),
		runCtx:    ctx,
		runCancel: cancel,
		quit:      make(chan struct{}),
		sessions:  make(map[string]*liveSession),
	}
	if a, ok := st.(AtomicSpender); ok && cfg.Guard != nil {
		s.atomic = a
	}
	if cfg.Replica != nil {
		if s.rep, err = newReplica(*cfg.Replica, st); err != nil {
			return nil, err
		}
		// Every write of a job or session is fenced by the lease; the
		// slots are the claimed jobs waiting for a worker.
		s.st = fencedStore{Store: st, r: s.rep}
		if s.atomic != nil {
			s.atomic = ownedSpender{AtomicSpender: s.atomic, r: s.rep}
		}
		s.slots = make(chan struct{}, max(cfg.Queue.Size, cfg.Queue.Workers))
	}
	if s.images, err = newImagePolicy(r, cfg.Images); err != nil {
		return nil, err
	}
	s.sm = newStoreMetrics()
	if cfg.Metrics.reg != nil {
		if err := s.sm.register(cfg.Metrics.reg, st); err != nil {
			return nil, fmt.Errorf("job.New: register store metrics: %w", err)
		}
	}
	s.cleanup = newCleanups(cfg.Logger)
	if cfg.Metrics.reg != nil {
		if err := s.cleanup.register(cfg.Metrics.reg); err != nil {
			return nil, fmt.Errorf("job.New: register cleanup metrics: %w", err)
		}
	}
	s.sink = newEventSink(st, cfg.Logger, s.sm)
	s.pool = newPool(s)
	s.cpu = newCPUCaps(s)
	tenants := make([]string, 0, len(cfg.Policies))
	for t := range cfg.Policies {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	s.approvals = newApprovalSet(tenants)
	if cfg.Metrics.reg != nil {
		if err := cfg.Metrics.reg.Register(s.approvals); err != nil {
			return nil, fmt.Errorf("job.New: register approval metrics: %w", err)
		}
	}
	return s, nil
}

// Start recovers from the previous process and starts the workers:
//  1. if the runner is a runner.Reaper, sandboxes left behind are reaped
//     (a failure is logged: the runner's reconcile loop retries it);
//  2. sessions left open become closed/lost, and every workspace no live
//     job or session of this process owns is removed (what cannot be goes
//     on the cleanup list, retried with backoff);
//  3. running jobs become failed/lost (their process died with the daemon);
//  4. queued jobs are queued again (they never started) and run in order of
//     creation, waiting for queue room if there are more than QueueSize.
//
// Start may be called once; when it fails (reading the store) the daemon
// should exit rather than run without recovery.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrShutdown
	}
	if s.started {
		s.mu.Unlock()
		return errors.New("job service already started")
	}
	s.started = true
	s.mu.Unlock()

	if rp, ok := s.r.(runner.Reaper); ok {
		n, err := rp.Reap(ctx)
		if err != nil {
			s.log.Warn("reap sandboxes of a previous process (the runner's reconcile loop retries)", "reaped", n, "err", err)
		} else {
			s.log.Info("reaped sandboxes of a previous process", "count", n)
		}
	}
	// The workspaces of a previous process (their mounts outlive it),
	// now that no sandbox of it binds them.
	if n, err := s.cfg.Workspaces.Cleanup(); err != nil {
		s.log.Warn("release the workspaces of a previous process", "released", n, "err", err)
	} else if n > 0 {
		s.log.Info("released the workspaces of a previous process", "mounts", n)
	}
	if s.rep == nil {
		if err := s.recoverSessions(ctx); err != nil {
			return err
		}
	}
	if n := s.sweepWorkspaces(); n > 0 {
		s.log.Info("removed workspaces of a previous process", "count", n)
	}
	s.sbg.Go(func() { s.cleanup.run(s.quit) })
	if err := s.restoreGuard(ctx); err != nil {
		return err
	}
	if s.rep != nil {
		// The other replicas' jobs and sessions are theirs: this one
		// takes over only its previous process's and expired replicas'.
		if err := s.startReplica(ctx); err != nil {
			return err
		}
		for range s.cfg.Queue.Workers {
			s.bg.Go(s.worker)
		}
		s.sbg.Go(s.reapSessions)
		s.sbg.Go(s.expireApprovals)
		s.sbg.Go(s.retentionLoop)
		s.pool.start()
		return nil
	}
	// Callbacks a stopped process left undelivered resume (read before
	// the running jobs below turn lost: those start their own).
	undelivered, err := s.st.ListPendingCallbacks(ctx)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	for _, j := range undelivered {
		s.startCallback(j)
	}
	if len(undelivered) > 0 {
		s.log.Info("resumed completion callbacks of a previous process", "count", len(undelivered))
	}
	unfinished, err := s.st.ListUnfinished(ctx)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	pending, err := s.st.ListPendingApprovals(ctx)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	byJob := make(map[string]*Approval, len(pending))
	for _, a := range pending {
		byJob[a.JobID] = a
	}
	var requeue []*entry
	for _, j := range unfinished {
		if j.State == StateQueued && j.SessionID != "" && s.entry(j.ID) == nil {
			// Its session's sandbox died with the process (the session
			// is closed lost): it cannot run, and it may have been
			// running (a session's short call is written running only
			// after lazyRunningAfter).
			j.State = StateRunning
		}
		if j.State == StateRunning && s.rerunsLost(j) {
			// It may have run: its tool cannot do anything twice, and
			// attempts are left. It runs again instead of ending lost.
			j.State, j.StartedAt = StateQueued, nil
			if err := s.st.Update(ctx, j); err != nil {
				return fmt.Errorf("start: requeue job %s: %w", j.ID, err)
			}
			s.m.retries.WithLabelValues(j.Tool, "retried").Inc()
			s.log.Warn("job interrupted by a restart runs again (retry-safe)", "job", j.ID, "tenant", j.Tenant, "tool", j.Tool, "attempts", j.Attempts)
		}
		switch j.State {
		case StateRunning:
			now := time.Now().UTC()
			j.State, j.Reason, j.FinishedAt = StateFailed, ReasonLost, &now
			j.Result = &tools.Result{OK: false, Error: "sandboxd restarted while the job was running"}
			if err := s.st.Update(ctx, j); err != nil {
				return fmt.Errorf("start: mark job %s lost: %w", j.ID, err)
			}
			// Its events so far stay; the finished event closes them
			// (a job recorded without events gets all three synthesized).
			if seq, err := s.lastSeq(ctx, j.ID); err == nil && seq > 0 {
				err = s.st.AppendEvents(ctx, []EventRecord{{JobID: j.ID, Seq: seq + 1, Type: EventFinished, Time: now}})
				if err != nil {
					s.log.Warn("record the lost job's finished event", "job", j.ID, "err", err)
				}
			}
			s.m.jobs.WithLabelValues(j.Tenant, j.Tool, j.Runner, OutcomeLost).Inc()
			s.startCallback(j)
			s.log.Warn("job lost in a restart", "job", j.ID, "tenant", j.Tenant, "tool", j.Tool)
		case StatePendingApproval:
			if s.entry(j.ID) != nil {
				continue
			}
			e, fresh, err := s.recoveredEntry(ctx, j)
			if err != nil {
				return err
			}
			if fresh {
				e.events.emit(Event{Type: EventPendingApproval, Time: j.CreatedAt, Job: cloneJob(j)})
			}
			s.register(e)
			a, ok := byJob[j.ID]
			if !ok { // died between recording the job and its approval
				s.failPending(e, ReasonInternal, "internal error: the approval request was not recorded")
				continue
			}
			s.approvals.add(a)
		case StateQueued:
			if s.entry(j.ID) != nil {
				continue // submitted to this process before Start
			}
			e, fresh, err := s.recoveredEntry(ctx, j)
			if err != nil {
				return err
			}
			if fresh {
				e.events.emit(Event{Type: EventQueued, Time: j.CreatedAt, Job: cloneJob(j)})
			}
			s.register(e)
			requeue = append(requeue, e)
		}
	}
	if len(requeue) > 0 {
		s.log.Info("re-queued jobs of a previous process", "count", len(requeue))
	}
	for range s.cfg.Queue.Workers {
		s.bg.Go(s.worker)
	}
	s.sbg.Go(s.reapSessions)
	s.sbg.Go(s.expireApprovals)
	s.sbg.Go(s.retentionLoop)
	s.pool.start()
	s.bg.Go(func() {
		for _, e := range requeue {
			select {
			case s.slots <- struct{}{}:
				s.m.queueDepth.Inc()
				s.sched.push(e)
			case <-s.quit:
				return // still queued in the store: runs at the next start
			}
		}
	})
	return nil
}

// Shutdown stops accepting jobs (Submit returns ErrShutdown) and lets
// running jobs finish until ctx ends; then it cancels them (failed/shutdown)
// and waits a little for the workers to record that. Jobs still queued stay
// queued in the store and run at the next Start. It returns ctx.Err() when
// jobs had to be cancelled.
func (s *Service) Shutdown(ctx context.Context) error {
	err := s.shutdownJobs(ctx)
	// The workers are done: no job uses a sandbox any more.
	s.releases.Wait()
	s.sbg.Wait()
	s.hooks.Wait()
	s.pool.stop()
	s.closeAllSessions(SessionReasonShutdown)
	s.sink.close()
	return err
}

func (s *Service) shutdownJobs(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.quit)
		s.sched.close()
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.bg.Wait(); close(done) }()
	select {
	case <-done:
		s.runCancel()
		return nil
	case <-ctx.Done():
	}
	s.emu.Lock()
	running := make([]*entry, 0, len(s.entries))
	for _, e := range s.entries {
		running = append(running, e)
	}
	s.emu.Unlock()
	for _, e := range running {
		e.mu.Lock()
		if e.job.State == StateRunning && e.cancel != nil && e.cancelReason == "" {
			e.cancelReason = ReasonShutdown
			e.cancel()
		}
		e.mu.Unlock()
	}
	s.runCancel() // also catches a job between dequeue and start
	select {
	case <-done:
		return fmt.Errorf("shutdown: cancelled running jobs: %w", ctx.Err())
	case <-time.After(10 * time.Second):
		return fmt.Errorf("shutdown: jobs still running 10s after cancel: %w", ctx.Err())
	}
}

// newEntry makes the in-memory side of a new job. Its events go to the
// store through the sink; the entry leaves memory once the job's finished
// event is committed.
func (s *Service) newEntry(j *Job, tool *tools.Tool, args map[string]any) *entry {
	return s.entryAfter(j, tool, args, 0)
}

// entryAfter is newEntry for a job whose events up to seq are recorded.
func (s *Service) entryAfter(j *Job, tool *tools.Tool, args map[string]any, seq int) *entry {
	streamCap := j.Limits.OutputBytes
	if streamCap <= 0 {
		streamCap = defaultStreamBytes
	}
	e := &entry{job: j, tool: tool, args: args, done: make(chan struct{}), retry: j.Retry,
		events: newHub(j.ID, streamCap, s.sink, seq)}
	e.events.onDurable = func() { s.retire(e) }
	return e
}

// recoveredEntry is the entry of a queued or pending job of an earlier
// process; its event numbering continues after the recorded events. fresh
// is true when none were recorded (the caller emits the first).
func (s *Service) recoveredEntry(ctx context.Context, j *Job) (*entry, bool, error) {
	seq, err := s.lastSeq(ctx, j.ID)
	if err != nil {
		return nil, false, fmt.Errorf("start: %w", err)
	}
	return s.entryAfter(j, nil, nil, seq), seq == 0, nil
}

// lastSeq is the seq of the job's last recorded event (0 when none).
func (s *Service) lastSeq(ctx context.Context, id string) (int, error) {
	seq := 0
	for {
		evs, err := s.st.ListEvents(ctx, id, seq, 1000)
		if err != nil {
			return 0, err
		}
		if len(evs) == 0 {
			return seq, nil
		}
		seq = evs[len(evs)-1].Seq
	}
}

// retire drops a finished job's entry once its events are durable: Wait,
// Cancel and Subscribe answer from the store from then on.
func (s *Service) retire(e *entry) {
	s.emu.Lock()
	defer s.emu.Unlock()
	if s.entries[e.job.ID] == e {
		delete(s.entries, e.job.ID)
	}
}

func (s *Service) entry(id string) *entry {
	s.emu.Lock()
	defer s.emu.Unlock()
	return s.entries[id]
}

func (s *Service) register(e *entry) {
	s.emu.Lock()
	defer s.emu.Unlock()
	s.entries[e.job.ID] = e
}

func (s *Service) unregister(id string) {
	s.emu.Lock()
	defer s.emu.Unlock()
	delete(s.entries, id)
}

// finished runs once per job after its terminal state is recorded: metrics,
// the finished event, waking waiters, and retiring old entries.
func (s *Service) finished(e *entry, j *Job) {
	s.m.jobs.WithLabelValues(j.Tenant, j.Tool, j.Runner, outcome(j)).Inc()
	if j.StartedAt != nil && j.FinishedAt != nil {
		d := j.FinishedAt.Sub(*j.StartedAt)
		s.m.duration.WithLabelValues(j.Tenant, j.Tool, j.Runner).Observe(d.Seconds())
		for { // exponential moving average, weight 1/8
			old := s.avgNanos.Load()
			nv := int64(d)
			if old > 0 {
				nv = old + (int64(d)-old)/8
			}
			if s.avgNanos.CompareAndSwap(old, nv) {
				break
			}
		}
	}
	if j.Result != nil { // Effects are set only when the tool ran
		for _, eff := range j.Result.Effects {
			s.m.effects.WithLabelValues(j.Tenant, j.Tool, string(eff)).Inc()
		}
	}
	s.cacheResult(e, j)
	// Once the finished event is durable the entry retires (retire).
	e.events.emit(Event{Type: EventFinished, Time: *j.FinishedAt, Job: j})
	close(e.done)
	s.startCallback(j)
	if j.SessionID != "" {
		if ls := s.liveSession(j.SessionID); ls != nil {
			ls.leave(j.ID)
		}
	}
}

// cloneJob returns a copy sharing nothing mutable with j.
func cloneJob(j *Job) *Job {
	if j == nil {
		return nil
	}
	c := *j
	c.Args = slices.Clone(j.Args)
	if j.Result != nil {
		r := *j.Result
		r.Effects = slices.Clone(r.Effects)
		r.Artifacts = slices.Clone(r.Artifacts)
		if r.Process != nil {
			p := *r.Process
			r.Process = &p
		}
		c.Result = &r
	}
	if j.StartedAt != nil {
		t := *j.StartedAt
		c.StartedAt = &t
	}
	if j.Guard != nil {
		g := *j.Guard
		g.Remaining = slices.Clone(g.Remaining)
		g.Spend = slices.Clone(g.Spend)
		c.Guard = &g
	}
	c.Egress = slices.Clone(j.Egress)
	c.Hooks = slices.Clone(j.Hooks)
	c.Callback = cloneCallback(j.Callback)
	c.Tags = slices.Clone(j.Tags)
	c.Metadata = maps.Clone(j.Metadata)
	if j.FinishedAt != nil {
		t := *j.FinishedAt
		c.FinishedAt = &t
	}
	return &c
}
