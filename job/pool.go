package job

import (
	"context"
	"path/filepath"
	"sync"

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
	templates map[poolKey]bool // per-tenant pools: keys without the tenant
	ready     map[poolKey][]pooledSandbox
	filling   map[poolKey]int
	stopped   bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newPool(s *Service) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	return &pool{
		s: s, size: s.cfg.Pool.Ready(),
		keys: map[poolKey]bool{}, templates: map[poolKey]bool{}, ready: map[poolKey][]pooledSandbox{}, filling: map[poolKey]int{},
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
	for _, k := range keys {
		p.refill(k)
	}
}

// take returns a ready sandbox of key. pooled is false when key is not a
// pooled profile (no hit or miss is counted).
func (p *pool) take(k poolKey) (ps pooledSandbox, ok, pooled bool) {
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
	} else {
		p.s.m.poolMisses.Inc()
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

// refill starts creating sandboxes until key has size ready or being
// created, or the sandbox cap is reached.
func (p *pool) refill(k poolKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	for len(p.ready[k])+p.filling[k] < p.size {
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
		sb, err = s.r.Create(p.ctx, spec)
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
	sb, err := s.r.Create(ctx, spec)
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
