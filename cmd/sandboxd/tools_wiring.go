package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
	"github.com/sandboxd/sandboxd/tools/custom"
	"github.com/sandboxd/sandboxd/tools/provider"
)

// registerWebSearch adds web_search (alias duckduckgo_search, the name
// frameworks give it) when a backend is configured.
func registerWebSearch(reg *tools.Registry, c config.WebSearch) error {
	if c.Backend.URL == "" {
		return nil
	}
	t := builtin.WebSearchTool(builtin.WebSearchOptions{Backend: c.Backend.URL, Format: c.Backend.Format, MaxResults: c.MaxResults, CacheTTL: c.CacheTTL})
	if err := reg.Register(t); err != nil {
		return fmt.Errorf("register web_search: %w", err)
	}
	return reg.AddAlias("duckduckgo_search", t.Name)
}

// markIdempotent marks the named built-in tools idempotent (tools.idempotent).
func markIdempotent(reg *tools.Registry, names []string) error {
	return markTools(reg, "tools.idempotent", names, func(t *tools.Tool) { t.Idempotent = true })
}

// markReturnDirect marks the named built-in tools return_direct
// (tools.return_direct).
func markReturnDirect(reg *tools.Registry, names []string) error {
	return markTools(reg, "tools.return_direct", names, func(t *tools.Tool) { t.ReturnDirect = true })
}

func markTools(reg *tools.Registry, key string, names []string, mark func(*tools.Tool)) error {
	for _, n := range names {
		t, ok := reg.Lookup(n)
		if !ok {
			return fmt.Errorf("%s: no built-in tool %q", key, n)
		}
		c := *t
		mark(&c)
		if err := reg.Register(&c); err != nil {
			return err
		}
	}
	return nil
}

// launcher runs stdio providers through the job service's long-lived
// sandboxed processes.
type launcher struct {
	svc *job.Service
	log *slog.Logger
}

func (l launcher) Launch(ctx context.Context, spec provider.LaunchSpec) (provider.Process, error) {
	name := strings.TrimPrefix(spec.Name, "provider-")
	p, err := l.svc.Launch(ctx, job.LaunchSpec{
		Name: spec.Name, Args: spec.Args, Env: spec.Env, Effects: spec.Effects, Image: spec.Image,
		Workspace: spec.Workspace, EgressScope: config.ProviderEgressScope(name),
		Stderr: job.LogWriter(l.log.With("provider", name), "provider stderr"),
	})
	if err != nil {
		return nil, err
	}
	return longProc{p}, nil
}

type longProc struct{ p *job.LongProcess }

func (l longProc) Stdin() io.WriteCloser { return l.p.Stdin }
func (l longProc) Stdout() io.ReadCloser { return l.p.Stdout }
func (l longProc) Done() <-chan struct{} { return l.p.Done() }
func (l longProc) Err() error            { return l.p.Err() }
func (l longProc) Stop()                 { l.p.Stop() }

// toolSources is the API's view of the tools directory and the providers.
type toolSources struct {
	dir  *custom.Directory // nil without tools_dir
	prov *provider.Manager
}

func (s *toolSources) Sources() []tools.SourceStatus {
	var out []tools.SourceStatus
	if s.dir != nil {
		out = append(out, s.dir.Status())
	}
	return append(out, s.prov.Sources()...)
}

func (s *toolSources) Reload(ctx context.Context) (tools.SourceStatus, error) {
	if s.dir == nil {
		return tools.SourceStatus{}, fmt.Errorf("%w: no tools_dir is configured", job.ErrInvalid)
	}
	return s.dir.Reload(ctx)
}

func (s *toolSources) Warm(ctx context.Context) { s.prov.Warm(ctx) }

// reloadOnHUP reloads the tools directory on every SIGHUP until ctx ends.
func reloadOnHUP(ctx context.Context, dir *custom.Directory, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading the tools directory")
				if dir != nil {
					_, _ = dir.Reload(ctx)
				}
			}
		}
	}()
}
