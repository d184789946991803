package job

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// The result cache answers identical calls of tools that cannot change
// anything (tools.Tool.Cache) without running them: the calculator, the
// read-only file tools within one session while its workspace is
// unchanged, web_search for its configured time. A hit is recorded as a
// job like any other, succeeded at once with the cached result and Cached
// set; the guard still decides it (a deny rule, a rate or usage limit
// and an approval still apply; a spent budget does not, since a hit
// spends nothing) and what the decision reserved is refunded.
//
// The key is the tool, its canonical arguments (the validated argument
// map re-encoded: keys sorted) and the tenant; for file_read tools also
// the session and its workspace version, which every job with the exec
// or file_write effect in the session bumps when submitted, started and
// finished, and every upload before and after it writes. A file tool
// outside a session (a fresh, empty workspace each time) is not cached.
// The cache is bounded by entries and by the size of one result (LRU).

// cacheable reports whether t's results may be cached at all: it says
// so, and it has neither exec nor file_write, nor http unless read-only.
func cacheable(t *tools.Tool) bool {
	if t == nil || t.Cache == nil {
		return false
	}
	for _, e := range t.Effects {
		switch e {
		case tools.EffectExec, tools.EffectFileWrite:
			return false
		case tools.EffectHTTP:
			if !t.Cache.HTTPReadOnly {
				return false
			}
		}
	}
	return true
}

// mutates reports whether a job of t may change its session's workspace.
func mutates(t *tools.Tool) bool {
	return t == nil || t.HasEffect(tools.EffectExec) || t.HasEffect(tools.EffectFileWrite)
}

// cacheKey is the key of a call, "" when it is not cacheable here.
func (s *Service) cacheKey(tenant, session string, t *tools.Tool, args map[string]any) string {
	if s.cache == nil || !cacheable(t) || len(s.hooksFor(tenant, t.Name)) > 0 {
		return "" // a hooked call always asks its hooks
	}
	canon, err := json.Marshal(args)
	if err != nil {
		return ""
	}
	scope := ""
	if t.HasEffect(tools.EffectFileRead) {
		if session == "" {
			return ""
		}
		ls := s.liveSession(session)
		if ls == nil {
			return ""
		}
		scope = session + "@" + ls.workspaceVersion()
	}
	h := sha256.New()
	for _, part := range []string{tenant, scope, t.Name, string(canon)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// resultCache is an LRU of results, bounded by entries.
type resultCache struct {
	mu       sync.Mutex
	max      int
	maxBytes int
	ll       *list.List // front: most recent
	m        map[string]*list.Element
}

type cacheEntry struct {
	key     string
	res     tools.Result
	expires time.Time // zero: none
}

func newResultCache(maxEntries, maxBytes int) *resultCache {
	if maxEntries <= 0 {
		return nil
	}
	return &resultCache{max: maxEntries, maxBytes: maxBytes, ll: list.New(), m: map[string]*list.Element{}}
}

func (c *resultCache) get(key string, now time.Time) (tools.Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[key]
	if !ok {
		return tools.Result{}, false
	}
	e := el.Value.(*cacheEntry)
	if !e.expires.IsZero() && !now.Before(e.expires) {
		c.ll.Remove(el)
		delete(c.m, key)
		return tools.Result{}, false
	}
	c.ll.MoveToFront(el)
	return cloneResult(e.res), true
}

// put keeps a successful result without artifacts' data beyond maxBytes
// in all (content and artifacts); a larger one is not cached.
func (c *resultCache) put(key string, r tools.Result, ttl time.Duration, now time.Time) bool {
	size := len(r.Content)
	for _, a := range r.Artifacts {
		size += len(a.Data) + len(a.Name)
	}
	if !r.OK || size > c.maxBytes {
		return false
	}
	e := &cacheEntry{key: key, res: cloneResult(r)}
	if ttl > 0 {
		e.expires = now.Add(ttl)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[key]; ok {
		el.Value = e
		c.ll.MoveToFront(el)
		return true
	}
	c.m[key] = c.ll.PushFront(e)
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.m, old.Value.(*cacheEntry).key)
	}
	return true
}

func (c *resultCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

func cloneResult(r tools.Result) tools.Result {
	r.Effects = slices.Clone(r.Effects)
	r.Artifacts = slices.Clone(r.Artifacts)
	for i := range r.Artifacts {
		r.Artifacts[i].Data = slices.Clone(r.Artifacts[i].Data)
	}
	if r.Process != nil {
		p := *r.Process
		r.Process = &p
	}
	return r
}

// submitCached records j as answered from the cache: succeeded at once
// with res, Cached set, its guard reservation refunded (a hit spends no
// budget). Its events and callback are a finished job's.
func (s *Service) submitCached(ctx context.Context, j *Job, res tools.Result) (*Job, bool, error) {
	s.refund(j)
	if g := j.Guard; g != nil && g.Outcome != policy.OutcomeAllow { // a spent budget: nothing is spent here
		g.Outcome, g.Code, g.Rule = policy.OutcomeAllow, "", ""
		g.Reason = "answered from the result cache: nothing spent (" + g.Reason + ")"
		g.Spend = nil
	}
	now := j.CreatedAt
	j.State, j.StartedAt, j.FinishedAt = StateSucceeded, &now, &now
	res.Usage = tools.Usage{}
	res.Effects = nil // nothing was spent
	j.Result, j.Cached = &res, true
	e := s.newEntry(j, nil, nil)
	if err := s.st.Create(ctx, j); err != nil {
		if j.IdempotencyKey != "" && errors.Is(err, ErrConflict) {
			if existing, gerr := s.st.GetByIdempotencyKey(ctx, j.Tenant, j.IdempotencyKey); gerr == nil {
				return existing, false, nil
			}
		}
		return nil, false, fmt.Errorf("submit: %w", err)
	}
	s.register(e)
	snap := cloneJob(j)
	e.events.emit(Event{Type: EventQueued, Time: now, Job: cloneJob(j)})
	s.finished(e, snap)
	s.log.Debug("call answered from the result cache", "job", j.ID, "tenant", j.Tenant, "tool", j.Tool)
	return cloneJob(snap), true, nil
}

// cacheResult keeps a finished job's successful result under its key.
func (s *Service) cacheResult(e *entry, j *Job) {
	if e.cacheKey == "" || j.Cached || j.State != StateSucceeded || j.Result == nil {
		return
	}
	if s.cache.put(e.cacheKey, *j.Result, e.cacheTTL, time.Now()) {
		s.m.cacheEntries.Set(float64(s.cache.len()))
	}
}
