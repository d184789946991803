// Package provider makes the tools of external MCP servers sandboxd tools.
// A provider is an MCP server run over stdio inside a sandbox (with the
// effects the operator grants it, network only through the egress proxy),
// or reached over streamable HTTP at an address the operator allows. Its
// tools join the registry as <provider>__<tool> with their schemas; each
// tool's effects come from the provider's configuration, and the hints the
// server declares (MCP annotations) may only narrow them
// (tools.Annotations.Narrow, the one mapping the MCP export uses the other
// way round). A provider starts lazily or at boot, one failing never blocks
// the others or the daemon, and a dead one is restarted with backoff while
// its tools are listed as unavailable.
package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"regexp"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// Config configures one provider. Exactly one of Command and URL is set.
type Config struct {
	// Name prefixes its tools (<name>__<tool>): letters, digits, '-' and
	// '_' (no "__"), at most 32.
	Name string
	// Command is the stdio server's argv, run inside a sandbox; Env its
	// environment (nothing of the daemon's).
	Command []string
	Env     []string
	// Image is the sandbox image ("": the runner's default). Workspace is
	// a host directory shown at /workspace (read-only with file_read,
	// read-write with file_write); "": one of its own, kept across
	// restarts.
	Image     string
	Workspace string
	// URL is a streamable-HTTP server. Its address must be public, or in
	// AllowPrivate (loopback and private networks are refused otherwise),
	// and never one of sandboxd's own.
	URL          string
	AllowPrivate []netip.Prefix
	// Effects are what the operator grants the provider: its sandbox is
	// isolated by them as a whole, and they are every tool's effects
	// unless Tools says otherwise (never more than these).
	Effects []tools.Effect
	// ParallelSafe is every tool's default: false, since the calls share
	// the one server process.
	ParallelSafe bool
	// Tools override per tool (by the server's name).
	Tools map[string]ToolConfig
	// Lazy starts the provider at the first call of one of its tools or
	// the first tool listing, instead of at boot.
	Lazy bool
	// StartTimeout bounds a start (sandbox, initialize, tools/list).
	// Default 30s. CallTimeout bounds a call. Default 5m.
	StartTimeout, CallTimeout time.Duration
	// Backoff is the first delay before a restart, doubling up to
	// MaxBackoff. Defaults 1s and 1m.
	Backoff, MaxBackoff time.Duration
}

// ToolConfig overrides one tool's properties.
type ToolConfig struct {
	// Effects replace the provider's for this tool (a subset of them).
	Effects []tools.Effect
	// ParallelSafe, Idempotent: see tools.Tool.
	ParallelSafe *bool
	Idempotent   bool
	// ReturnDirect: see tools.Tool.
	ReturnDirect bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Validate checks c and fills its defaults.
func (c *Config) Validate() error {
	switch {
	case !nameRE.MatchString(c.Name) || regexp.MustCompile(`__`).MatchString(c.Name):
		return fmt.Errorf("name %q: want 1-32 letters, digits, '-' or '_' without \"__\"", c.Name)
	case len(c.Command) > 0 && c.URL != "":
		return errors.New("set command (stdio, in a sandbox) or url (streamable HTTP), not both")
	case len(c.Command) == 0 && c.URL == "":
		return errors.New("set command (stdio, in a sandbox) or url (streamable HTTP)")
	case len(c.Command) > 0 && c.Command[0] == "":
		return errors.New("command: empty program")
	}
	if len(c.Command) > 0 && !slices.Contains(c.Effects, tools.EffectExec) {
		return errors.New("effects: a stdio provider runs a process and needs exec")
	}
	for _, e := range c.Effects {
		if !e.Valid() {
			return fmt.Errorf("effects: unknown effect %q", e)
		}
	}
	for name, tc := range c.Tools {
		for _, e := range tc.Effects {
			if !slices.Contains(c.Effects, e) {
				return fmt.Errorf("tools.%s.effects: %q is not among the provider's effects %v", name, e, c.Effects)
			}
		}
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 5 * time.Minute
	}
	if c.Backoff <= 0 {
		c.Backoff = time.Second
	}
	if c.MaxBackoff < c.Backoff {
		c.MaxBackoff = max(time.Minute, c.Backoff)
	}
	return nil
}

// Launcher starts a long-lived process in a fresh sandbox (the daemon
// wires job.Service.Launch).
type Launcher interface {
	Launch(ctx context.Context, spec LaunchSpec) (Process, error)
}

// LaunchSpec is what a stdio provider asks of its sandbox.
type LaunchSpec struct {
	Name      string
	Args, Env []string
	Effects   []tools.Effect
	Image     string
	Workspace string
}

// Process is a launched process: its stdio, and when it ended.
type Process interface {
	Stdin() io.WriteCloser
	Stdout() io.ReadCloser
	Done() <-chan struct{}
	// Err says how it ended (once Done).
	Err() error
	// Stop kills it and destroys its sandbox.
	Stop()
}

// Provider states (tools.SourceStatus.State).
const (
	StateStopped    = "stopped"
	StateStarting   = "starting"
	StateReady      = "ready"
	StateRestarting = "restarting"
)
