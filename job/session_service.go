package job

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// liveSession is the in-memory side of an open session of this process.
//
// Ordering: Submit appends a job to order; the job runs only when it is at
// the head (waitTurn), and leaves when it reaches a terminal state
// (Service.finished), which wakes the next one. So a session's jobs run one
// at a time in submission order, whatever worker takes them.
type liveSession struct {
	mu     sync.Mutex
	sess   *Session
	sb     runner.Sandbox       // nil while creating
	dir    string               // host workspace (read-write)
	ws     *workspace.Workspace // its filesystem; nil while creating
	order  []string             // job IDs waiting or running, oldest first
	turn   chan struct{}        // closed and replaced whenever order changes
	closed bool
	// current is the job that ran last (or runs): the sandbox's egress
	// decisions belong to it, also those recorded just after it ended.
	current string
	// storedUse is the LastUsedAt last written to the store.
	storedUse time.Time
	// version counts the changes that may have touched the workspace
	// (cache.go): the result cache keys file_read tools by it.
	version atomic.Int64
	// pooled is the pooled sandbox the session took while it is created
	// (takePooledSession); nil when it creates its own.
	pooled *pooledSandbox
}

// bumpWorkspace records that the workspace may have changed.
func (ls *liveSession) bumpWorkspace() { ls.version.Add(1) }

func (ls *liveSession) workspaceVersion() string { return strconv.FormatInt(ls.version.Load(), 10) }

func (ls *liveSession) snapshot() *Session {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	c := cloneSession(ls.sess)
	if ls.sb != nil {
		c.Sandbox = ls.sb.ID()
	}
	return c
}

func (ls *liveSession) changedLocked() {
	close(ls.turn)
	ls.turn = make(chan struct{})
}

// join queues a job ID behind the session's earlier jobs.
func (ls *liveSession) join(id string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.order = append(ls.order, id)
	ls.changedLocked()
}

// leave removes a job ID (idempotent).
func (ls *liveSession) leave(id string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if i := slices.Index(ls.order, id); i >= 0 {
		ls.order = slices.Delete(ls.order, i, i+1)
		ls.changedLocked()
	}
}

// waitTurn blocks until id is the session's oldest job, the session closes
// (ErrSessionClosed), ctx ends, or limit passes (errTurnTimeout).
func (ls *liveSession) waitTurn(ctx context.Context, id string, limit time.Duration) error {
	var timeout <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	for {
		ls.mu.Lock()
		if ls.closed {
			ls.mu.Unlock()
			return ErrSessionClosed
		}
		if len(ls.order) > 0 && ls.order[0] == id {
			ls.current = id
			ls.mu.Unlock()
			return nil
		}
		ch := ls.turn
		ls.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return errTurnTimeout
		}
	}
}

// busy reports whether a job is queued or running in the session.
func (ls *liveSession) busy() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.order) > 0
}

func (s *Service) liveSession(id string) *liveSession {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.sessions[id]
}

// activeSession returns the tenant's active live session or
// ErrSessionNotFound / ErrSessionClosed.
func (s *Service) activeSession(ctx context.Context, tenant, id string) (*liveSession, error) {
	ls := s.liveSession(id)
	if ls == nil {
		ss, err := s.GetSession(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: session %s is %s (%s)", ErrSessionClosed, id, ss.State, ss.Reason)
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.sess.Tenant != tenant {
		return nil, fmt.Errorf("session %s: %w", id, ErrSessionNotFound)
	}
	if ls.closed || ls.sess.State != SessionActive {
		return nil, fmt.Errorf("%w: session %s is %s", ErrSessionClosed, id, ls.sess.State)
	}
	return ls, nil
}

// CreateSession creates a persistent sandbox for the tenant. The session is
// recorded (creating) before the sandbox exists, then becomes active, or
// failed when the runner refuses: a spec the runner cannot honour (an
// "http" effect needs egress) is ErrUnsupported. An image the tenant may
// not use, or a malformed one, is ErrInvalid before anything is recorded
// or asked of the runner.
func (s *Service) CreateSession(ctx context.Context, tenant string, req SessionRequest) (*Session, error) {
	if tenant == "" {
		return nil, fmt.Errorf("%w: empty tenant", ErrInvalid)
	}
	if s.r == nil {
		return nil, fmt.Errorf("%w: sessions need a runner", ErrUnsupported)
	}
	effects, err := sessionEffects(req.Effects)
	if err != nil {
		return nil, err
	}
	image, err := s.images.check(tenant, req.Image)
	if err != nil {
		return nil, err
	}
	limits, err := s.cfg.effectiveLimits(req.Limits)
	if err != nil {
		return nil, err
	}
	ttl, idle := req.TTL, req.IdleTimeout
	switch {
	case ttl < 0 || idle < 0:
		return nil, fmt.Errorf("%w: ttl and idle timeout must not be negative", ErrInvalid)
	case ttl == 0:
		ttl = s.cfg.Sessions.DefaultTTL
	case ttl > s.cfg.Sessions.MaxTTL:
		return nil, fmt.Errorf("%w: ttl %s exceeds the maximum %s", ErrInvalid, ttl, s.cfg.Sessions.MaxTTL)
	}
	if idle == 0 {
		idle = s.cfg.Sessions.DefaultIdle
	}
	idle = min(idle, ttl)
	tags, md, err := checkLabels(s.cfg.Labels, "the session", req.Tags, req.Metadata)
	if err != nil {
		return nil, err
	}

	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, ErrShutdown
	}
	now := time.Now().UTC()
	sess := &Session{
		ID: ids.At("ses_", now), Tenant: tenant, Image: image, Effects: effects, Limits: limits,
		State: SessionCreating, TTL: ttl, IdleTimeout: idle, Tags: tags, Metadata: md,
		CreatedAt: now, ExpiresAt: now.Add(ttl), LastUsedAt: now,
	}
	ls := &liveSession{sess: sess, turn: make(chan struct{}),
		dir: filepath.Join(s.cfg.WorkDir, "sessions", sess.ID)}
	// A fitting pooled sandbox is taken before the reservation: it is
	// already counted alive, so the session needs no room of its own.
	ls.pooled = s.takePooledSession(ls)
	if err := s.reserveSession(ls); err != nil {
		if ps := ls.pooled; ps != nil {
			s.releases.Go(func() { s.pool.destroy(*ps); s.pool.refillAll() })
		}
		return nil, err
	}
	s.m.sessionsActive.WithLabelValues(tenant).Inc()
	fail := func(err error) (*Session, error) {
		s.smu.Lock()
		delete(s.sessions, sess.ID)
		s.smu.Unlock()
		if ps := ls.pooled; ps != nil {
			s.releases.Go(func() { s.pool.destroy(*ps); s.pool.refillAll() })
		} else {
			s.alive.Add(-1)
		}
		s.m.sessionsActive.WithLabelValues(tenant).Dec()
		return nil, err
	}
	if err := s.st.CreateSession(ctx, sess); err != nil {
		return fail(fmt.Errorf("create session: %w", err))
	}
	sb, err := s.createSessionSandbox(ctx, ls)
	if err != nil {
		t := time.Now().UTC()
		sess.State, sess.Reason, sess.ClosedAt = SessionFailed, SessionReasonCreate, &t
		s.storeSession(sess)
		s.m.sessionsClosed.WithLabelValues(SessionReasonCreate).Inc()
		s.log.Warn("create session sandbox", "session", sess.ID, "tenant", tenant, "err", err)
		return fail(err)
	}
	ls.mu.Lock()
	ls.sb = sb
	sess.State = SessionActive
	snap := cloneSession(sess)
	ls.mu.Unlock()
	s.storeSession(snap)
	if ls.pooled == nil { // a pooled sandbox was counted when it was made
		s.m.sandboxesAlive.Inc()
	}
	s.log.Info("session created", "session", sess.ID, "tenant", tenant, "effects", effects)
	return snap, nil
}

// reserveSession checks the tenant's limit and the sandbox cap and adds ls
// to the live sessions, counting its sandbox as alive.
func (s *Service) reserveSession(ls *liveSession) error {
	s.smu.Lock()
	defer s.smu.Unlock()
	n := 0
	for _, o := range s.sessions {
		if o.sess.Tenant == ls.sess.Tenant { // Tenant never changes
			n++
		}
	}
	if n >= s.cfg.Sessions.MaxPerTenant {
		return fmt.Errorf("%w: tenant %q already has %d open sessions (the limit); delete one first",
			ErrSessionLimit, ls.sess.Tenant, n)
	}
	if ls.pooled == nil && !s.reserveSandbox(true) {
		return fmt.Errorf("%w: the daemon is at its limit of %d sandboxes; retry later",
			ErrSessionLimit, s.cfg.Pool.MaxSandboxes)
	}
	s.sessions[ls.sess.ID] = ls
	return nil
}

// reserveSandbox counts one more sandbox alive if that stays within
// MaxSandboxes, evicting a pooled sandbox to make room if evict is set (the
// pool's own refill never evicts, and must not: it holds the pool's lock).
func (s *Service) reserveSandbox(evict bool) bool {
	for {
		n := s.alive.Load()
		if n >= int64(s.cfg.Pool.MaxSandboxes) {
			if !evict || !s.pool.evictOne() {
				return false
			}
			continue
		}
		if s.alive.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *Service) createSessionSandbox(ctx context.Context, ls *liveSession) (runner.Sandbox, error) {
	sess := ls.sess
	spec, err := s.specFor(sess.ID, sess.Tenant, sess.ID, sess.Effects, func(r EgressRecord) { s.recordSessionEgress(ls, r) })
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if ls.pooled != nil {
		return s.usePooledSession(ctx, ls), nil
	}
	// Always a workspace, also when the sandbox does not see it: uploads
	// go there.
	ws, err := s.newWorkspace(ctx, ls.dir, sess.Limits, spec.Isolation.Workspace)
	if err != nil {
		return nil, fmt.Errorf("create session workspace: %w", infraCause(err))
	}
	spec.Image, spec.Workspace, spec.Limits = sess.Image, ws.View, sess.Limits
	spec.Labels = map[string]string{"session": sess.ID, "tenant": sess.Tenant}
	s.tenantSpec(&spec, sess.Tenant)
	sb, err := s.create(ctx, spec)
	if err != nil {
		s.releaseWorkspace(ws)
		switch {
		case errors.Is(err, runner.ErrUnsupported):
			return nil, fmt.Errorf("%w: the %s runner cannot create this session: %v", ErrUnsupported, s.cfg.RunnerName, err)
		case errors.Is(err, runner.ErrInvalidSpec):
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return nil, fmt.Errorf("create session sandbox: %w", infraCause(err))
	}
	ls.ws = ws
	return sb, nil
}

func sessionEffects(req []tools.Effect) ([]tools.Effect, error) {
	if len(req) == 0 {
		return slices.Clone(DefaultSessionEffects), nil
	}
	var out []tools.Effect
	for _, e := range req {
		if !e.Valid() {
			return nil, fmt.Errorf("%w: unknown effect %q (want file_read, file_write, exec or http)", ErrInvalid, e)
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// GetSession returns a tenant's session; another tenant's is
// ErrSessionNotFound.
func (s *Service) GetSession(ctx context.Context, tenant, id string) (*Session, error) {
	if ls := s.liveSession(id); ls != nil {
		if snap := ls.snapshot(); visible(tenant, snap.Tenant) {
			return snap, nil
		}
		return nil, fmt.Errorf("session %s: %w", id, ErrSessionNotFound)
	}
	ss, err := s.st.GetSession(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && !visible(tenant, ss.Tenant)) {
		return nil, fmt.Errorf("session %s: %w", id, ErrSessionNotFound)
	}
	return ss, err
}

// ListSessions returns a tenant's sessions newest first.
func (s *Service) ListSessions(ctx context.Context, tenant string, f SessionFilter) ([]*Session, string, error) {
	switch f.State {
	case "", SessionCreating, SessionActive, SessionClosed, SessionFailed:
	default:
		return nil, "", fmt.Errorf("%w: unknown session state %q", ErrInvalid, f.State)
	}
	if err := checkFilter(s.cfg.Labels, f.LabelFilter); err != nil {
		return nil, "", err
	}
	out, next, err := s.st.ListSessions(ctx, tenant, f)
	if err != nil {
		return nil, "", err
	}
	for i, ss := range out { // this process's view is fresher (last_used_at)
		if ls := s.liveSession(ss.ID); ls != nil {
			out[i] = ls.snapshot()
		}
	}
	return out, next, nil
}

// CloseSession closes a tenant's session: its sandbox is destroyed (a
// running job fails) and its workspace removed. Closing a closed session
// returns it unchanged.
func (s *Service) CloseSession(ctx context.Context, tenant, id string) (*Session, error) {
	ls := s.liveSession(id)
	if ls == nil || ls.snapshot().Tenant != tenant {
		return s.GetSession(ctx, tenant, id)
	}
	return s.closeSession(ls, SessionReasonDeleted), nil
}

// closeSession closes a live session once; later calls return the closed
// snapshot.
func (s *Service) closeSession(ls *liveSession, reason string) *Session {
	ls.mu.Lock()
	if ls.closed || ls.sb == nil { // closed, or still being created
		snap := cloneSession(ls.sess)
		ls.mu.Unlock()
		return snap
	}
	ls.closed = true
	now := time.Now().UTC()
	ls.sess.State, ls.sess.Reason, ls.sess.ClosedAt = SessionClosed, reason, &now
	ls.changedLocked()
	snap := cloneSession(ls.sess)
	sb := ls.sb
	ls.mu.Unlock()

	s.smu.Lock()
	delete(s.sessions, snap.ID)
	s.smu.Unlock()
	s.storeSession(snap)
	if s.cfg.Guard != nil {
		s.cfg.Guard.ForgetSession(snap.Tenant, snap.ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := sb.Close(ctx); err != nil {
		s.log.Error("close session sandbox", "session", snap.ID, "err", err)
	}
	s.sandboxClosed()
	s.releaseWorkspace(ls.ws)
	s.m.sessionsActive.WithLabelValues(snap.Tenant).Dec()
	s.m.sessionsClosed.WithLabelValues(reason).Inc()
	s.log.Info("session closed", "session", snap.ID, "tenant", snap.Tenant, "reason", reason)
	s.pool.refillAll() // the cap may have room for the pool again
	return snap
}

// sandboxClosed counts a sandbox destroyed.
func (s *Service) sandboxClosed() {
	s.alive.Add(-1)
	s.m.sandboxesAlive.Dec()
}

func (s *Service) closeAllSessions(reason string) {
	s.smu.Lock()
	all := make([]*liveSession, 0, len(s.sessions))
	for _, ls := range s.sessions {
		all = append(all, ls)
	}
	s.smu.Unlock()
	for _, ls := range all {
		s.closeSession(ls, reason)
	}
}

// touchStoreEvery bounds how stale a live session's last_used_at in the
// store may be. Live sessions are read from memory and closing one stores
// its final state, so only a crash sees the stored value; writing it at the
// start and end of every call cost two SQLite writes per call, a quarter of
// the daemon's CPU in a warm session.
const touchStoreEvery = 10 * time.Second

// touch records that a job used the session now: in memory always, in the
// store at most every touchStoreEvery.
func (s *Service) touch(ls *liveSession) {
	now := time.Now().UTC()
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.sess.LastUsedAt = now
	if ls.closed || now.Sub(ls.storedUse) < touchStoreEvery {
		return
	}
	// Written under ls.mu: a close, which sets closed under it, stores
	// its snapshot after this one, never before.
	ls.storedUse = now
	s.storeSession(cloneSession(ls.sess))
}

// reapSessions closes expired and idle sessions every ReapInterval until
// Shutdown.
func (s *Service) reapSessions() {
	t := time.NewTicker(s.cfg.Sessions.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.reapOnce(time.Now())
		}
	}
}

func (s *Service) reapOnce(now time.Time) {
	s.smu.Lock()
	all := make([]*liveSession, 0, len(s.sessions))
	for _, ls := range s.sessions {
		all = append(all, ls)
	}
	s.smu.Unlock()
	for _, ls := range all {
		snap := ls.snapshot()
		if snap.State != SessionActive {
			continue
		}
		switch {
		case !now.Before(snap.ExpiresAt):
			s.closeSession(ls, SessionReasonExpired)
		case snap.IdleTimeout > 0 && now.Sub(snap.LastUsedAt) >= snap.IdleTimeout && !ls.busy():
			s.closeSession(ls, SessionReasonIdle)
		}
	}
}

// recoverSessions marks the sessions a previous process left open as
// closed/lost: their sandboxes died with it (the runner's Reap destroyed
// what was left), and their workspaces are removed.
func (s *Service) recoverSessions(ctx context.Context) error {
	open, err := s.st.ListOpenSessions(ctx)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	for _, ss := range open {
		if s.liveSession(ss.ID) != nil {
			continue // created by this process before Start
		}
		now := time.Now().UTC()
		ss.State, ss.Reason, ss.ClosedAt = SessionClosed, SessionReasonLost, &now
		if err := s.st.UpdateSession(ctx, ss); err != nil {
			return fmt.Errorf("start: mark session %s lost: %w", ss.ID, err)
		}
		s.removeWorkspace(filepath.Join(s.cfg.WorkDir, "sessions", ss.ID))
		s.m.sessionsClosed.WithLabelValues(SessionReasonLost).Inc()
		s.log.Warn("session lost in a restart", "session", ss.ID, "tenant", ss.Tenant)
	}
	return nil
}

func (s *Service) storeSession(ss *Session) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := s.st.UpdateSession(ctx, ss); err != nil {
		s.log.Error("record session state", "session", ss.ID, "state", ss.State, "err", err)
	}
}
