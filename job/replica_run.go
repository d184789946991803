package job

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// replica is the service's side of the replica coordination (replica.go):
// its lease, renewed by leaseLoop, the dispatcher that claims queued jobs
// for free workers, and the takeover of expired replicas.
type replica struct {
	c   Coordinator
	cfg ReplicaConfig

	mu    sync.Mutex
	lease Lease

	lost     atomic.Bool
	lostOnce sync.Once
	// busy counts the claimed jobs not finished; the dispatcher claims
	// only for workers left free.
	busy atomic.Int64
	wake chan struct{}

	// batchMu guards resumeBatches and the batches taken over before it
	// was set (at start, before Turns.Recover).
	batchMu       sync.Mutex
	resumeBatches func([]*BatchRecord)
	taken         []*BatchRecord
}

// takenBatches hands batches taken over to the turn executor, or keeps
// them until it is there.
func (r *replica) takenBatches(bs []*BatchRecord) {
	r.batchMu.Lock()
	f := r.resumeBatches
	if f == nil {
		r.taken = append(r.taken, bs...)
	}
	r.batchMu.Unlock()
	if f != nil {
		f(bs)
	}
}

// onBatches makes f resume the batches taken over, those taken before
// first.
func (r *replica) onBatches(f func([]*BatchRecord)) {
	r.batchMu.Lock()
	r.resumeBatches = f
	bs := r.taken
	r.taken = nil
	r.batchMu.Unlock()
	if len(bs) > 0 {
		f(bs)
	}
}

func (r *replica) current() Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// poke wakes the dispatcher (never blocks).
func (r *replica) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// fencedStore is the service's store on a replica: every write of a job
// or session is fenced by the replica's lease (Coordinator.UpdateFenced).
type fencedStore struct {
	Store
	r *replica
}

func (f fencedStore) Update(ctx context.Context, j *Job) error {
	return f.r.c.UpdateFenced(ctx, f.r.current(), j)
}

// Create records a session's job and a job waiting for approval as this
// replica's: they run (or wait) here, and a request for them reaching
// another replica is forwarded here (Coordinator.JobOwner).
func (f fencedStore) Create(ctx context.Context, j *Job) error {
	if j.SessionID != "" || j.State == StatePendingApproval {
		return f.r.c.CreateOwned(ctx, f.r.current(), j)
	}
	return f.Store.Create(ctx, j)
}

// ownedSpender records a call waiting for approval, inserted with its
// guard spend (AtomicSpender), as this replica's: it waits in this
// process's memory, and a decision or cancel reaching another replica is
// forwarded here (Coordinator.JobOwner). A session's job needs nothing:
// JobOwner finds it through its session.
type ownedSpender struct {
	AtomicSpender
	r *replica
}

func (o ownedSpender) CreateSpending(ctx context.Context, j *Job, c Charge, capacity int, self *SelfClaim) ([]int64, bool, error) {
	used, claimed, err := o.AtomicSpender.CreateSpending(ctx, j, c, capacity, self)
	if err == nil && j.State == StatePendingApproval {
		if oerr := o.r.c.SetJobOwner(ctx, o.r.current(), j.ID); oerr != nil {
			// Recorded and spent: it waits here all the same, only a
			// decision on another replica does not find it.
			return used, claimed, nil
		}
	}
	return used, claimed, err
}

// CreateBatch records a batch as this replica's: it runs here, and a
// replica taking this one over resumes it (Takeover.Batches).
func (f fencedStore) CreateBatch(ctx context.Context, b *BatchRecord) error {
	return f.r.c.CreateBatchOwned(ctx, f.r.current(), b)
}

// UpdateBatch writes a batch this replica owns (fenced: once taken over,
// only the taker writes it).
func (f fencedStore) UpdateBatch(ctx context.Context, b *BatchRecord) error {
	return f.r.c.UpdateBatchFenced(ctx, f.r.current(), b)
}

func (f fencedStore) CreateSession(ctx context.Context, ss *Session) error {
	return f.r.c.CreateSessionOwned(ctx, f.r.current(), ss)
}

func (f fencedStore) UpdateSession(ctx context.Context, ss *Session) error {
	return f.r.c.UpdateSessionFenced(ctx, f.r.current(), ss)
}

// Replica is this service's replica identity and current lease; ok is
// false without Config.Replica.
func (s *Service) Replica() (l Lease, ok bool) {
	if s.rep == nil {
		return Lease{}, false
	}
	return s.rep.current(), true
}

// Coordinator is the store's replica coordination (nil without
// Config.Replica).
func (s *Service) Coordinator() Coordinator {
	if s.rep == nil {
		return nil
	}
	return s.rep.c
}

func newReplica(cfg ReplicaConfig, st Store) (*replica, error) {
	c, ok := st.(Coordinator)
	if !ok {
		return nil, errors.New("job.New: replicas need a store that coordinates them (Postgres)")
	}
	if cfg.ID == "" {
		return nil, errors.New("job.New: a replica needs an id")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 15 * time.Second
	}
	return &replica{c: c, cfg: cfg, wake: make(chan struct{}, 1)}, nil
}

// startReplica joins (a new epoch), takes over what the previous process
// of this replica and every expired replica left, and starts the lease
// loop, the listener and the dispatcher.
func (s *Service) startReplica(ctx context.Context) error {
	l, err := s.rep.c.Join(ctx, s.rep.cfg.ID, s.rep.cfg.Address, s.rep.cfg.LeaseTTL)
	if err != nil {
		return fmt.Errorf("start: join as replica %s: %w", s.rep.cfg.ID, err)
	}
	s.rep.mu.Lock()
	s.rep.lease = l
	s.rep.mu.Unlock()
	s.log.Info("joined as replica", "replica", l.Replica, "epoch", l.Epoch, "address", l.Address)
	if err := s.takeOver(ctx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	s.sbg.Go(s.leaseLoop)
	s.sbg.Go(s.listenQueued)
	s.bg.Go(s.dispatch)
	return nil
}

// leaseLost stops this replica serving: once, it logs, refuses new work
// and calls OnLost (the process stops).
func (s *Service) leaseLost(err error) {
	s.rep.lostOnce.Do(func() {
		s.rep.lost.Store(true)
		s.log.Error("replica lease lost: stopping serving", "replica", s.rep.cfg.ID, "err", err)
		s.sched.close()
		if s.rep.cfg.OnLost != nil {
			go s.rep.cfg.OnLost(err)
		}
	})
}

// leaseLoop renews the lease every LeaseTTL/3 and takes over expired
// replicas. A renewal that finds the lease lost, or no successful renewal
// for LeaseTTL (the database away), loses it.
func (s *Service) leaseLoop() {
	ttl := s.rep.cfg.LeaseTTL
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
		l := s.rep.current()
		err := s.rep.c.Renew(ctx, &l, ttl)
		cancel()
		switch {
		case errors.Is(err, ErrLeaseLost):
			s.leaseLost(err)
			return
		case err != nil:
			if time.Since(lastOK) > ttl {
				s.leaseLost(fmt.Errorf("not renewed for %s: %w", ttl, err))
				return
			}
			s.log.Warn("renew replica lease", "err", err)
			continue
		}
		lastOK = time.Now()
		s.rep.mu.Lock()
		s.rep.lease.Expires = l.Expires
		s.rep.mu.Unlock()
		ctx, cancel = context.WithTimeout(context.Background(), ttl/3)
		if err := s.takeOver(ctx); err != nil {
			s.log.Warn("take over expired replicas", "err", err)
		}
		cancel()
		s.rep.poke() // a safety net for a NOTIFY missed while the database was away
	}
}

// takeOver ends the bookkeeping of the expired replicas (and of this
// replica's previous process): lost jobs get their finished event and
// callback, callbacks still being delivered resume here, sessions' workspaces here go, the dead replica's sandboxes
// are reaped when the runner reaches them, and the released jobs are
// claimed.
func (s *Service) takeOver(ctx context.Context) error {
	tos, err := s.rep.c.TakeOver(ctx, s.rep.current(), Rerun{Tools: s.retrySafeTools(), MaxStarted: s.cfg.Turns.Retries})
	for _, t := range tos {
		for _, j := range t.Lost {
			if seq, err := s.lastSeq(ctx, j.ID); err == nil {
				typ := EventFinished
				evs := []EventRecord{{JobID: j.ID, Seq: seq + 1, Type: typ, Time: time.Now().UTC()}}
				if err := s.st.AppendEvents(ctx, evs); err != nil {
					s.log.Warn("record the lost job's finished event", "job", j.ID, "err", err)
				}
			}
			s.m.jobs.WithLabelValues(j.Tenant, j.Tool, j.Runner, OutcomeLost).Inc()
			s.startCallback(j)
		}
		for _, j := range t.Requeued {
			if j.Attempts > 0 { // it was running: it runs again (Rerun)
				s.m.retries.WithLabelValues(j.Tool, "retried").Inc()
			}
		}
		for _, j := range t.Callbacks { // where the dead replica left off
			s.startCallback(j)
		}
		for _, ss := range t.Sessions {
			if t.Dead.Replica == s.rep.cfg.ID {
				s.removeWorkspace(filepath.Join(s.cfg.WorkDir, "sessions", ss.ID))
			}
			s.m.sessionsClosed.WithLabelValues(SessionReasonLost).Inc()
		}
		reaped := 0
		if rr, ok := s.r.(runner.ReplicaReaper); ok {
			n, rerr := rr.ReapReplica(ctx, t.Dead.Replica)
			if rerr != nil {
				s.log.Warn("reap the sandboxes of a dead replica", "replica", t.Dead.Replica, "err", rerr)
			}
			reaped = n
		}
		s.log.Warn("took over a replica whose lease expired", "replica", t.Dead.Replica, "epoch", t.Dead.Epoch,
			"lost_jobs", len(t.Lost), "requeued_jobs", len(t.Requeued), "lost_sessions", len(t.Sessions), "resumed_callbacks", len(t.Callbacks), "reaped_sandboxes", reaped)
		if len(t.Requeued) > 0 {
			s.rep.poke()
		}
		if len(t.Batches) > 0 {
			s.log.Info("took over the turn batches of a replica", "replica", t.Dead.Replica, "epoch", t.Dead.Epoch, "batches", len(t.Batches))
			s.rep.takenBatches(t.Batches)
		}
	}
	if errors.Is(err, ErrLeaseLost) {
		s.leaseLost(err)
	}
	return err
}

// listenQueued wakes the dispatcher on every announced job, listening
// again after the database comes back.
func (s *Service) listenQueued() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.quit; cancel() }()
	for ctx.Err() == nil {
		ready := make(chan struct{})
		err := s.rep.c.WaitQueued(ctx, s.rep.wake, ready)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("listen for queued jobs (retrying)", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		s.rep.poke()
	}
}

// dispatch claims queued jobs for this replica's free workers, whenever
// woken (a job announced or submitted here, a worker freed) and every
// second, and hands them to the local scheduler.
func (s *Service) dispatch() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	order := s.claimOrder()
	backoff := 50 * time.Millisecond
	for {
		select {
		case <-s.quit:
			return
		case <-s.rep.wake:
		case <-tick.C:
		}
		for !s.rep.lost.Load() {
			free := s.cfg.Queue.Workers - int(s.rep.busy.Load())
			if free <= 0 {
				break
			}
			ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
			cs, err := s.rep.c.Claim(ctx, s.rep.current(), min(free, 32), order)
			cancel()
			if errors.Is(err, ErrLeaseLost) {
				s.leaseLost(err)
				return
			}
			if err != nil {
				s.log.Warn("claim queued jobs", "err", err)
				select {
				case <-s.quit:
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, time.Second)
				break
			}
			backoff = 50 * time.Millisecond
			for _, c := range cs {
				s.rep.busy.Add(1)
				e := s.entryAfter(c.Job, nil, nil, c.LastSeq)
				e.claimed = true
				if c.LastSeq == 0 {
					e.events.emit(Event{Type: EventQueued, Time: c.Job.CreatedAt, Job: cloneJob(c.Job)})
				}
				s.register(e)
				s.slots <- struct{}{} // room: claims never exceed the workers
				s.m.queueDepth.Inc()
				s.sched.push(e)
			}
			if len(cs) < free {
				break
			}
		}
	}
}

// enqueueShared is Submit's queueing on a replica: the job is recorded
// queued in the store, where any replica's free worker claims it; the
// queue's capacity counts every replica's queued jobs. When this replica
// has a worker free, the job is recorded claimed by it if the fair order
// allows (SelfClaim): no claim round trip, no other replica woken. mine
// is true when this replica then holds that worker for the job and must
// start it (startClaimed): it claimed it, or the insert's outcome is
// unknown (the store failed mid-answer), where starting it is safe
// because its running write, fenced, finds no job that was not recorded.
func (s *Service) enqueueShared(ctx context.Context, j *Job) (mine bool, err error) {
	if s.rep.lost.Load() {
		return false, fmt.Errorf("submit: %w: this replica lost its lease", ErrShutdown)
	}
	self := s.selfClaim(j)
	claimed, err := s.rep.c.Enqueue(ctx, j, s.cfg.Queue.Size, self)
	mine = s.settleSelfClaim(self, claimed, err)
	if err == nil && !claimed {
		s.rep.poke()
	}
	return mine, err
}

// selfClaim reserves a free worker for j and asks for the job claimed at
// its insert (nil when no worker is free).
func (s *Service) selfClaim(j *Job) *SelfClaim {
	if !s.rep.reserve(s.cfg.Queue.Workers) {
		return nil
	}
	return &SelfClaim{Lease: s.rep.current(), Cap: s.claimOrder().capOf(j.Tenant)}
}

// settleSelfClaim keeps the worker selfClaim reserved when the insert
// claimed the job or its outcome is unknown (mine: the caller starts the
// job), and frees it otherwise.
func (s *Service) settleSelfClaim(self *SelfClaim, claimed bool, err error) (mine bool) {
	if self == nil {
		return false
	}
	var refused *SpendRefused
	unknown := err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrQueueFull) &&
		!errors.Is(err, ErrInvalid) && !errors.As(err, &refused)
	if claimed || unknown {
		return true
	}
	s.rep.busy.Add(-1)
	return false
}

// reserve takes one of workers for a job this replica may claim itself;
// false when none is free. (The dispatcher, claiming for the workers it
// saw free a moment before, may hand out one more: that job waits for a
// worker in this replica's scheduler.)
func (r *replica) reserve(workers int) bool {
	for {
		b := r.busy.Load()
		if b >= int64(workers) {
			return false
		}
		if r.busy.CompareAndSwap(b, b+1) {
			return true
		}
	}
}

// startClaimed queues a job this replica claimed at its insert
// (enqueueShared) for the worker reserved for it, as the dispatcher does
// a claimed one.
func (s *Service) startClaimed(j *Job, tool *tools.Tool, args map[string]any, cacheKey string) {
	e := s.newEntry(cloneJob(j), tool, args)
	e.claimed = true
	if cacheKey != "" && tool != nil {
		e.cacheKey, e.cacheTTL = cacheKey, tool.Cache.TTL
	}
	e.events.emit(Event{Type: EventQueued, Time: j.CreatedAt, Job: cloneJob(j)})
	s.register(e)
	s.slots <- struct{}{} // room: claims never exceed the workers
	s.m.queueDepth.Inc()
	s.sched.push(e)
}

// claimOrder is the fair order of this replica's claims. The running
// caps set in the configuration (tenants[].max_running,
// queue.tenant_max_running) hold across replicas in the claim; the
// default cap, a share of this replica's workers, stays this replica's
// (its scheduler applies every cap locally too).
func (s *Service) claimOrder() ClaimOrder {
	order := ClaimOrder{Weights: map[string]int{}, Caps: map[string]int{}, DefaultCap: s.cfg.Queue.TenantMaxRunning}
	for t, sh := range s.cfg.Shares {
		order.Weights[t] = sh.Weight
		if sh.MaxRunning > 0 {
			order.Caps[t] = sh.MaxRunning
		}
	}
	return order
}

// capOf is tenant's running cap across replicas (<= 0: none).
func (o ClaimOrder) capOf(tenant string) int {
	if c := o.Caps[tenant]; c > 0 {
		return c
	}
	return o.DefaultCap
}

// waitShared is Wait for a job this replica does not run (yet): it polls
// the store, switching to the local entry once this replica claims it.
func (s *Service) waitShared(ctx context.Context, tenant, id string) (*Job, error) {
	d := 2 * time.Millisecond
	for {
		if e := s.entry(id); e != nil && visible(tenant, e.tenant()) {
			select {
			case <-e.done:
				return e.snapshot(), nil
			case <-ctx.Done():
				return e.snapshot(), ctx.Err()
			}
		}
		j, err := s.Get(ctx, tenant, id)
		if err != nil || j.State.Terminal() {
			return j, err
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(d):
		}
		d = min(2*d, 100*time.Millisecond)
	}
}

// HoldsSession reports whether session id is open in this process (its
// sandbox is here): a request for it is served here, not forwarded.
func (s *Service) HoldsSession(id string) bool { return s.liveSession(id) != nil }

// HoldsJob reports whether this process tracks job id (queued, waiting for
// approval or running here).
func (s *Service) HoldsJob(id string) bool { return s.entry(id) != nil }
