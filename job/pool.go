package job

import (
	"context"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
	"github.com/sandboxd/sandboxd/internal/workspace"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/tools"
)

// poolKey is the isolation profile a pooled sandbox was created for. Only
// a job whose spec has the same key may take it. The runner is implicit (a
// Service has one). iso is policy.Compile's shared value: equal pointers,
// equal isolation.
type poolKey struct {
	image  string
	iso    *runner.Isolation
	limits runner.Limits
	tenant string // the tenant's parent cgroup (Service.tenantCPU), "" for none
}

func keyOf(spec runner.SandboxSpec) poolKey {
	return poolKey{image: spec.Image, iso: spec.Isolation, limits: spec.Limits, tenant: spec.Tenant}
}

// imageLabel is the pool_ready label: the image only, to keep cardinality
// small.
func (k poolKey) imageLabel() string {
	if k.image == "" {
		return "default"
	}
	return k.image
}

type pooledSandbox struct {
	sb runner.Sandbox
	ws *workspace.Workspace // its own fresh workspace (nil: none), used by the job that takes it
}

// pool keeps Size ready sandboxes per pooled key for one-shot jobs. A
// pooled sandbox serves exactly one job and is destroyed after it; the pool
// refills in the background after every take, within MaxSandboxes.
//
// Pooled keys are the default profile (no image, default limits, no
// network) of every registered sandboxed tool without the http effect,
// computed at Start. Jobs with other limits create fresh sandboxes. When
// sandboxes are grouped by tenant (Service.tenantCPU), a pooled sandbox
// is in its tenant's cgroup from its creation: those profiles are
// templates, and a tenant's first job of one (a miss) makes it a pooled
// key of that tenant.
type pool struct {
	s    *Service
	size int

	mu        sync.Mutex
	keys      map[poolKey]bool
	templates map[poolKey]bool        // per-tenant pools: keys without the tenant
	prestart  map[poolKey]*tools.Tool // by key without the tenant: the tool whose command a pooled sandbox starts ahead
	ready     map[poolKey][]pooledSandbox
	filling   map[poolKey]int
	stopped   bool
	// target is a key's ready sandboxes (default size): doubled at each
	// miss up to maxReady and the memory budget, down by one each
	// shrinkEvery without a miss (grow, shrink).
	target   map[poolKey]int
	lastMiss map[poolKey]time.Time
	maxReady int
	shrink   time.Duration // shrinkEvery when the pool was made

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newPool(s *Service) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	return &pool{
		s: s, size: s.cfg.Pool.Ready(),
		keys: map[poolKey]bool{}, templates: map[poolKey]bool{}, prestart: map[poolKey]*tools.Tool{},
		ready: map[poolKey][]pooledSandbox{}, filling: map[poolKey]int{},
		target: map[poolKey]int{}, lastMiss: map[poolKey]time.Time{}, maxReady: max(s.cfg.Pool.MaxReady, s.cfg.Pool.Ready()), shrink: shrinkEvery,
		ctx: ctx, cancel: cancel,
	}
}

func (p *pool) enabled() bool { return p.size > 0 && p.s.r != nil }

// start computes the pooled keys and pre-warms them.
func (p *pool) start() {
	if !p.enabled() {
		return
	}
	limits, err := p.s.cfg.effectiveLimits(runner.Limits{})
	if err != nil {
		p.s.log.Error("pool: default limits", "err", err)
		return
	}
	var keys []poolKey
	p.mu.Lock()
	for _, t := range p.s.reg.Tools() {
		if t.Command == nil || t.HasEffect(tools.EffectHTTP) {
			continue
		}
		k := poolKey{iso: policy.Compile(t.Effects).Spec, limits: limits}
		if t.Name == "python_repl" && !p.s.cfg.Pool.NoPrestart {
			p.prestart[k] = t
		}
		if p.s.tenantCPU() {
			p.templates[k] = true
			continue
		}
		if !p.keys[k] {
			p.keys[k] = true
			keys = append(keys, k)
		}
	}
	p.mu.Unlock()
	if p.maxReady > p.size {
		p.wg.Go(p.shrinkLoop)
	}
	for _, k := range keys {
		p.refill(k)
	}
}

// takeHit is take counting a hit but no miss (sessions).
func (p *pool) takeHit(k poolKey) (pooledSandbox, bool) {
	ps, ok, _ := p.takeCounting(k, false)
	return ps, ok
}

// take returns a ready sandbox of key. pooled is false when key is not a
// pooled profile (no hit or miss is counted).
func (p *pool) take(k poolKey) (ps pooledSandbox, ok, pooled bool) {
	return p.takeCounting(k, true)
}

func (p *pool) takeCounting(k poolKey, countMiss bool) (ps pooledSandbox, ok, pooled bool) {
	if !p.enabled() {
		return ps, false, false
	}
	p.mu.Lock()
	if t := k; !p.keys[k] && t.tenant != "" {
		t.tenant = ""
		p.keys[k] = p.templates[t] // the tenant's first: a miss, and a pool from now on
	}
	if !p.keys[k] || p.stopped {
		p.mu.Unlock()
		return ps, false, false
	}
	if q := p.ready[k]; len(q) > 0 {
		ps = q[0]
		p.ready[k] = q[1:]
		ok = true
	}
	p.mu.Unlock()
	if ok {
		p.s.m.poolHits.Inc()
		p.s.m.poolReady.WithLabelValues(k.imageLabel()).Dec()
	} else if countMiss {
		p.s.m.poolMisses.Inc()
		p.grow(k)
	}
	p.refill(k)
	return ps, ok, true
}

// refillAll refills every pooled key: called when a sandbox is destroyed,
// since the cap may have kept an earlier refill from completing.
func (p *pool) refillAll() {
	if !p.enabled() {
		return
	}
	p.mu.Lock()
	keys := make([]poolKey, 0, len(p.keys))
	for k := range p.keys {
		keys = append(keys, k)
	}
	p.mu.Unlock()
	for _, k := range keys {
		p.refill(k)
	}
}

// targetLocked is k's ready sandboxes to keep. Call with p.mu held.
func (p *pool) targetLocked(k poolKey) int {
	if t, ok := p.target[k]; ok {
		return t
	}
	return p.size
}

// grow doubles k's target after a miss, within maxReady and the memory
// budget (the cap on sandboxes alive bounds every refill anyway).
func (p *pool) grow(k poolKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := min(max(2*p.targetLocked(k), 1), p.maxReady)
	if b, m := p.s.cfg.Pool.MemoryBudget, k.limits.MemoryBytes; b > 0 && m > 0 {
		t = min(t, max(int(b/m), p.size))
	}
	p.target[k] = max(t, p.targetLocked(k))
	p.lastMiss[k] = time.Now()
}

// shrinkEvery is how long a grown key goes without a miss before its
// target drops by one (and a ready sandbox past it is destroyed).
var shrinkEvery = time.Minute

// shrinkLoop lowers grown targets while no job misses.
func (p *pool) shrinkLoop() {
	t := time.NewTicker(p.shrink)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
		var extra []pooledSandbox
		p.mu.Lock()
		for k, n := range p.target {
			if n <= p.size || time.Since(p.lastMiss[k]) < p.shrink {
				continue
			}
			p.target[k] = n - 1
			if q := p.ready[k]; len(q) > n-1 {
				extra = append(extra, q[len(q)-1])
				p.ready[k] = q[:len(q)-1]
				p.s.m.poolReady.WithLabelValues(k.imageLabel()).Dec()
			}
		}
		p.mu.Unlock()
		for _, ps := range extra {
			p.destroy(ps)
		}
	}
}

// refill starts creating sandboxes until key has size ready or being
// created, or the sandbox cap is reached.
func (p *pool) refill(k poolKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	for len(p.ready[k])+p.filling[k] < p.targetLocked(k) {
		if !p.s.reserveSandbox(false) {
			return
		}
		p.filling[k]++
		p.wg.Go(func() { p.create(k) })
	}
}

func (p *pool) create(k poolKey) {
	s := p.s
	id := ids.New("pool_")
	spec := runner.SandboxSpec{
		ID: id, Image: k.image, Isolation: k.iso,
		Limits: k.limits, Labels: map[string]string{"pool": k.imageLabel()},
	}
	s.tenantSpec(&spec, k.tenant)
	// The workspace's filesystem is made here, ahead of the job, like
	// the sandbox.
	var ws *workspace.Workspace
	var sb runner.Sandbox
	var err error
	if k.iso.Workspace != runner.WorkspaceNone {
		ws, err = s.newWorkspace(p.ctx, filepath.Join(s.cfg.WorkDir, "pool", id), k.limits, k.iso.Workspace)
		if err == nil {
			spec.Workspace = ws.View
		}
	}
	if err == nil {
		sb, err = s.create(p.ctx, spec)
	}
	if err == nil {
		p.startAhead(k, sb)
	}
	p.mu.Lock()
	p.filling[k]--
	if err != nil {
		p.mu.Unlock()
		s.alive.Add(-1)
		s.releaseWorkspace(ws)
		if p.ctx.Err() == nil {
			s.log.Warn("pool: create sandbox", "err", err)
		}
		return
	}
	s.m.sandboxesAlive.Inc()
	if p.stopped {
		p.mu.Unlock()
		p.destroy(pooledSandbox{sb: sb, ws: ws})
		return
	}
	p.ready[k] = append(p.ready[k], pooledSandbox{sb: sb, ws: ws})
	p.mu.Unlock()
	s.m.poolReady.WithLabelValues(k.imageLabel()).Inc()
}

// startAhead starts, in a new pooled sandbox of k, the command of the
// key's prestarted tool (python_repl's interpreter, which reads its code
// from stdin) as a job of the tool would run it with the key's limits:
// the job's Exec then only hands it the code (runner.Prestarter). The
// sandbox still serves one job; another tool's command finds the
// interpreter gone. A failure only costs that job the start-up.
func (p *pool) startAhead(k poolKey, sb runner.Sandbox) {
	p.mu.Lock()
	tk := k
	tk.tenant = ""
	t := p.prestart[tk]
	p.mu.Unlock()
	ps, ok := sb.(runner.Prestarter)
	if t == nil || !ok {
		return
	}
	pr, err := prestartProcess(t, k.limits)
	if err == nil {
		err = ps.Prestart(p.ctx, pr)
	}
	if err != nil && p.ctx.Err() == nil {
		p.s.log.Debug("pool: prestart", "sandbox", sb.ID(), "tool", t.Name, "err", err)
	}
	// A session may take the sandbox: its REPL's interpreter too (a
	// one-shot job's Exec kills it before it runs).
	if as, ok := sb.(runner.AgentSandbox); ok && as.Agent() != nil {
		if err := as.Agent().WarmREPL(p.ctx); err != nil && p.ctx.Err() == nil {
			p.s.log.Debug("pool: warm the REPL", "sandbox", sb.ID(), "err", err)
		}
	}
}

// takePooledSession takes for a new session a pooled sandbox that fits
// it: the same image, isolation (its effects, without http: pooled
// profiles have no egress) and limits, with a workspace of its own made
// with those limits. The image was held to the allowlist before
// (CreateSession). nil when none fits or is ready (no miss is counted:
// misses are one-shot jobs'); the caller creates a sandbox then.
func (s *Service) takePooledSession(ls *liveSession) *pooledSandbox {
	iso := policy.Compile(ls.sess.Effects).Spec
	if iso.Network != runner.NetworkNone {
		return nil
	}
	k := poolKey{image: ls.sess.Image, iso: iso, limits: ls.sess.Limits}
	if s.tenantCPU() { // pooled sandboxes are in their tenant's CPU group
		k.tenant = ls.sess.Tenant
	}
	ps, ok := s.pool.takeHit(k)
	if !ok {
		return nil
	}
	if ps.ws == nil { // a session always has a workspace (uploads)
		s.releases.Go(func() { s.pool.destroy(ps); s.pool.refillAll() })
		return nil
	}
	return &ps
}

// usePooledSession makes ls's pooled sandbox the session's: its workspace
// becomes the session's (ls.dir, ls.ws) and the process held for a
// one-shot call is dropped; the REPL the pool warmed is the session's.
func (s *Service) usePooledSession(ctx context.Context, ls *liveSession) runner.Sandbox {
	ps := ls.pooled
	if as, ok := ps.sb.(runner.AgentSandbox); ok && as.Agent() != nil {
		if err := as.Agent().Prestart(ctx, nil); err != nil {
			s.log.Debug("pool: drop the held process", "sandbox", ps.sb.ID(), "err", err)
		}
	}
	ls.dir, ls.ws = ps.ws.Dir, ps.ws
	return ps.sb
}

// prestartProcess is the process a job of t with default arguments and
// limits runs (runSandboxed), without its stdin: the code.
func prestartProcess(t *tools.Tool, limits runner.Limits) (runner.Process, error) {
	cmd, err := t.Command(map[string]any{"code": "pass"})
	if err != nil {
		return runner.Process{}, err
	}
	timeout := limits.Timeout
	if cmd.Timeout > 0 && (timeout == 0 || cmd.Timeout < timeout) {
		timeout = cmd.Timeout
	}
	pr := commandProcess(cmd, t.HasEffect(tools.EffectHTTP), timeout, io.Discard, io.Discard)
	pr.Stdin = nil
	return pr, nil
}

// destroy closes a pooled sandbox and removes its workspace.
func (p *pool) destroy(ps pooledSandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := ps.sb.Close(ctx); err != nil {
		p.s.log.Error("pool: close sandbox", "sandbox", ps.sb.ID(), "err", err)
	}
	p.s.sandboxClosed()
	p.s.releaseWorkspace(ps.ws)
}

// evictOne destroys one ready sandbox to make room under the cap.
func (p *pool) evictOne() bool {
	p.mu.Lock()
	var ps pooledSandbox
	var key poolKey
	found := false
	for k, q := range p.ready {
		if len(q) > 0 {
			ps, key, found = q[len(q)-1], k, true
			p.ready[k] = q[:len(q)-1]
			break
		}
	}
	p.mu.Unlock()
	if !found {
		return false
	}
	p.s.m.poolReady.WithLabelValues(key.imageLabel()).Dec()
	p.destroy(ps)
	return true
}

// stop cancels pending creations and destroys every ready sandbox.
func (p *pool) stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	var all []pooledSandbox
	for k, q := range p.ready {
		all = append(all, q...)
		p.s.m.poolReady.WithLabelValues(k.imageLabel()).Sub(float64(len(q)))
		delete(p.ready, k)
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, ps := range all {
		p.destroy(ps)
	}
}

// oneShotSandbox gives a one-shot job its sandbox: a pooled one when its
// profile is pooled and one is ready, else a fresh one with the workspace
// WorkDir/<job-id> (none when the sandbox would not see it). release
// destroys it and releases its workspace; the sandbox never serves
// another job.
func (s *Service) oneShotSandbox(ctx context.Context, spec runner.SandboxSpec) (runner.Sandbox, func(), error) {
	if ps, ok, _ := s.pool.take(keyOf(spec)); ok {
		return ps.sb, func() { s.pool.destroy(ps); s.pool.refillAll() }, nil
	}
	var ws *workspace.Workspace
	if spec.Isolation.Workspace != runner.WorkspaceNone {
		var err error
		if ws, err = s.newWorkspace(ctx, filepath.Join(s.cfg.WorkDir, spec.ID), spec.Limits, spec.Isolation.Workspace); err != nil {
			return nil, nil, err
		}
		spec.Workspace = ws.View
	}
	cleanup := func() { s.releaseWorkspace(ws) }
	// One-shot jobs are bounded by the workers: past the cap they evict a
	// pooled sandbox if they can, else run anyway.
	if !s.reserveSandbox(true) {
		s.alive.Add(1)
	}
	sb, err := s.create(ctx, spec)
	if err != nil {
		s.alive.Add(-1)
		cleanup()
		return nil, nil, err
	}
	s.m.sandboxesAlive.Inc()
	return sb, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := sb.Close(cctx); err != nil {
			s.log.Error("close sandbox", "sandbox", sb.ID(), "err", err)
		}
		s.sandboxClosed()
		cleanup()
		s.pool.refillAll()
	}, nil
}
