package provider

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/tools"
)

// Options configure a Manager.
type Options struct {
	// Registry receives the providers' tools.
	Registry *tools.Registry
	// Launcher runs stdio providers in sandboxes (nil: they fail to start).
	Launcher Launcher
	// Protected are sandboxd's own addresses: no URL provider may be one.
	Protected *netclass.Protected
	Logger    *slog.Logger
	// Version is reported to the servers as the client's.
	Version string
}

// Manager runs every configured provider. Lifecycle: NewManager, Start,
// then Stop (before the runner closes).
type Manager struct {
	reg       *tools.Registry
	launcher  Launcher
	protected *netclass.Protected
	log       *slog.Logger
	version   string
	providers []*provider

	ctx    context.Context
	cancel context.CancelFunc
	quit   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// NewManager validates the configs (names unique) and makes the manager.
func NewManager(cfgs []Config, opts Options) (*Manager, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{reg: opts.Registry, launcher: opts.Launcher, protected: opts.Protected, log: opts.Logger,
		version: opts.Version, ctx: ctx, cancel: cancel, quit: make(chan struct{})}
	seen := map[string]bool{}
	for i, c := range cfgs {
		if err := c.Validate(); err != nil {
			cancel()
			return nil, fmt.Errorf("providers[%d] (%q): %w", i, c.Name, err)
		}
		if seen[strings.ToLower(c.Name)] {
			cancel()
			return nil, fmt.Errorf("providers[%d]: name %q is used twice", i, c.Name)
		}
		seen[strings.ToLower(c.Name)] = true
		m.providers = append(m.providers, newProvider(m, c))
	}
	if m.reg != nil {
		m.reg.SetMissHook(m.resolve)
	}
	return m, nil
}

// Start starts the providers configured to start at boot, in the
// background: a slow or failing one never holds up the daemon.
func (m *Manager) Start() {
	for _, p := range m.providers {
		if !p.cfg.Lazy {
			p.ensureRunning()
		}
	}
}

// Stop stops every provider (their sandboxes are destroyed) and waits.
func (m *Manager) Stop() {
	m.once.Do(func() {
		close(m.quit)
		m.cancel()
	})
	m.wg.Wait()
}

func (m *Manager) stopped() bool {
	select {
	case <-m.quit:
		return true
	default:
		return false
	}
}

// resolve is the registry's miss hook: a call of <provider>__<tool> for
// a lazy provider that has not started starts it and waits for its tools.
func (m *Manager) resolve(name string) bool {
	prefix, _, ok := strings.Cut(name, "__")
	if !ok {
		return false
	}
	for _, p := range m.providers {
		if !strings.EqualFold(p.cfg.Name, prefix) {
			continue
		}
		p.mu.Lock()
		fresh := !p.running
		p.mu.Unlock()
		if !fresh {
			return false // it runs: its tools are what it listed
		}
		ctx, cancel := context.WithTimeout(m.ctx, p.cfg.StartTimeout)
		defer cancel()
		_, _, err := p.session(ctx)
		return err == nil
	}
	return false
}

// Warm starts every lazy provider that has not started and waits, until
// ctx ends, for each to become ready or fail, so a listing shows their
// tools.
func (m *Manager) Warm(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range m.providers {
		p.mu.Lock()
		fresh := !p.running
		p.mu.Unlock()
		if fresh {
			wg.Go(func() { _, _, _ = p.session(ctx) })
		}
	}
	wg.Wait()
}

// Sources is every provider's state, for GET /v1/tools.
func (m *Manager) Sources() []tools.SourceStatus {
	out := make([]tools.SourceStatus, 0, len(m.providers))
	for _, p := range m.providers {
		p.mu.Lock()
		st := tools.SourceStatus{Name: p.cfg.Name, Kind: "provider", State: p.state, Tools: slices.Clone(p.names),
			Restarts: p.restarts, Since: p.since}
		if st.Tools == nil {
			st.Tools = []string{}
		}
		if p.err != nil && p.state != StateReady {
			st.Error = p.err.Error()
		}
		if p.state == StateRestarting && !p.next.IsZero() {
			n := p.next
			st.NextStart = &n
		}
		p.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// Collector exports the providers' state: sandboxd_provider_up{provider}
// (1 when ready), sandboxd_provider_state{provider,state},
// sandboxd_provider_tools{provider} and
// sandboxd_provider_restarts_total{provider}.
func (m *Manager) Collector() prometheus.Collector { return &collector{m: m} }

type collector struct{ m *Manager }

var (
	upDesc       = prometheus.NewDesc("sandboxd_provider_up", "1 when the MCP provider is ready, else 0.", []string{"provider"}, nil)
	stateDesc    = prometheus.NewDesc("sandboxd_provider_state", "The MCP provider's state (1 for the current one): stopped, starting, ready, restarting.", []string{"provider", "state"}, nil)
	toolsDesc    = prometheus.NewDesc("sandboxd_provider_tools", "Tools the MCP provider lists.", []string{"provider"}, nil)
	restartsDesc = prometheus.NewDesc("sandboxd_provider_restarts_total", "Times the MCP provider died or failed to start and was restarted.", []string{"provider"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upDesc
	ch <- stateDesc
	ch <- toolsDesc
	ch <- restartsDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.m.Sources() {
		up := 0.0
		if st.State == StateReady {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, st.Name)
		for _, s := range []string{StateStopped, StateStarting, StateReady, StateRestarting} {
			v := 0.0
			if s == st.State {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, v, st.Name, s)
		}
		ch <- prometheus.MustNewConstMetric(toolsDesc, prometheus.GaugeValue, float64(len(st.Tools)), st.Name)
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(st.Restarts), st.Name)
	}
}
