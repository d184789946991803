package main

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/provider"
)

// The configuration of turns (POST /v1/tool-calls), tools without Go
// code (tools_dir) and tool providers (MCP servers). Defaults are in
// defaultConfig with the others.

// ToolsConfig relates the tools directory's files to the built-ins.
type ToolsConfig struct {
	// ReplaceBuiltins names the built-in tools a file of tools_dir may
	// replace (a file defining one of the others is refused).
	ReplaceBuiltins []string `yaml:"replace_builtins"`
	// Idempotent marks built-in tools idempotent: a call whose sandbox
	// died after it may have started is retried (tools spending nothing
	// beyond file_read are retried anyway).
	Idempotent []string `yaml:"idempotent"`
}

// TurnsConfig configures the turn executor.
type TurnsConfig struct {
	// Concurrency bounds the calls of one batch running at once.
	Concurrency int `yaml:"concurrency"`
	// Retries and RetryBackoff: further attempts after an infrastructure
	// failure (when safe) and the first delay, doubling.
	Retries      int      `yaml:"retries"`
	RetryBackoff Duration `yaml:"retry_backoff"`
	// Keep is how long a finished batch stays readable.
	Keep Duration `yaml:"keep"`
}

// AdminConfig names the tenants that may call /v1/admin routes.
type AdminConfig struct {
	Tenants []string `yaml:"tenants"`
}

// ProviderConfig configures one MCP server as a tool provider.
type ProviderConfig struct {
	Name string `yaml:"name"`
	// Command runs a stdio server inside a sandbox; URL reaches a
	// streamable-HTTP one. Exactly one.
	Command []string          `yaml:"command"`
	Env     map[string]string `yaml:"env"`
	URL     string            `yaml:"url"`
	// AllowPrivateCIDRs lets a URL provider be on these private or
	// loopback networks (refused otherwise).
	AllowPrivateCIDRs []string `yaml:"allow_private_cidrs"`
	// Effects are granted to the provider's sandbox and are every tool's
	// unless Tools narrows them; the server's hints may narrow them too.
	Effects []tools.Effect `yaml:"effects"`
	// Egress is the allowlist of a stdio provider with the http effect.
	Egress       *policy.EgressPolicy          `yaml:"egress"`
	Image        string                        `yaml:"image"`
	Workspace    string                        `yaml:"workspace"`
	ParallelSafe bool                          `yaml:"parallel_safe"`
	Tools        map[string]ProviderToolConfig `yaml:"tools"`
	// Start is "lazy" (the default: at the first listing or call) or
	// "boot".
	Start        string   `yaml:"start"`
	StartTimeout Duration `yaml:"start_timeout"`
	CallTimeout  Duration `yaml:"call_timeout"`
	Backoff      Duration `yaml:"restart_backoff"`
	MaxBackoff   Duration `yaml:"max_restart_backoff"`
}

// ProviderToolConfig overrides one provider tool.
type ProviderToolConfig struct {
	Effects      []tools.Effect `yaml:"effects"`
	ParallelSafe *bool          `yaml:"parallel_safe"`
	Idempotent   bool           `yaml:"idempotent"`
}

// providerEgressScope is the egress "tenant" of a provider's sandbox.
func providerEgressScope(name string) string { return "provider:" + name }

// provider turns the YAML into the provider package's config.
func (p ProviderConfig) provider() (provider.Config, error) {
	c := provider.Config{
		Name: p.Name, Command: p.Command, URL: p.URL, Effects: p.Effects, Image: p.Image, Workspace: p.Workspace,
		ParallelSafe: p.ParallelSafe, Lazy: p.Start != "boot",
		StartTimeout: time.Duration(p.StartTimeout), CallTimeout: time.Duration(p.CallTimeout),
		Backoff: time.Duration(p.Backoff), MaxBackoff: time.Duration(p.MaxBackoff),
	}
	switch p.Start {
	case "", "lazy", "boot":
	default:
		return c, fmt.Errorf("start %q: want lazy or boot", p.Start)
	}
	for k, v := range p.Env {
		if !envVarName(k) {
			return c, fmt.Errorf("env: %q is not a variable name", k)
		}
		c.Env = append(c.Env, k+"="+v)
	}
	slices.Sort(c.Env)
	if len(c.Command) > 0 && !slices.ContainsFunc(c.Env, func(kv string) bool { return len(kv) > 5 && kv[:5] == "PATH=" }) {
		c.Env = append(c.Env, "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp")
	}
	for _, s := range p.AllowPrivateCIDRs {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			return c, fmt.Errorf("allow_private_cidrs: %q: %v", s, err)
		}
		c.AllowPrivate = append(c.AllowPrivate, pre.Masked())
	}
	if p.Workspace != "" && !filepath.IsAbs(p.Workspace) {
		return c, fmt.Errorf("workspace %q: must be an absolute path", p.Workspace)
	}
	if len(p.Tools) > 0 {
		c.Tools = map[string]provider.ToolConfig{}
		for name, t := range p.Tools {
			c.Tools[name] = provider.ToolConfig{Effects: t.Effects, ParallelSafe: t.ParallelSafe, Idempotent: t.Idempotent}
		}
	}
	if p.Egress != nil {
		tp := policy.TenantPolicy{Egress: *p.Egress}
		if err := tp.Validate(); err != nil {
			return c, fmt.Errorf("egress: %w", err)
		}
	}
	return c, c.Validate()
}

func envVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// validateTools checks tools_dir, turns, providers and admin.
func (c *Config) validateTools(bad func(string, ...any)) {
	if c.ToolsDir != "" && !filepath.IsAbs(c.ToolsDir) {
		bad("tools_dir %q: must be an absolute path", c.ToolsDir)
	}
	if c.Turns.Concurrency < 1 {
		bad("turns.concurrency %d: must be at least 1", c.Turns.Concurrency)
	}
	if c.Turns.Retries < 0 || c.Turns.Retries > 10 {
		bad("turns.retries %d: want 0 to 10", c.Turns.Retries)
	}
	if c.Turns.RetryBackoff <= 0 {
		bad("turns.retry_backoff %q: must be positive", time.Duration(c.Turns.RetryBackoff))
	}
	if c.Turns.Keep <= 0 {
		bad("turns.keep %q: must be positive", time.Duration(c.Turns.Keep))
	}
	seen := map[string]bool{}
	for i, p := range c.Providers {
		if _, err := p.provider(); err != nil {
			bad("providers[%d] (%q): %v", i, p.Name, err)
		}
		if seen[p.Name] {
			bad("providers[%d]: name %q is used twice", i, p.Name)
		}
		seen[p.Name] = true
	}
	tenants := map[string]bool{}
	for i, t := range c.Tenants {
		tenants[t.Name] = true
		if strings.HasPrefix(t.Name, "provider:") {
			bad("tenants[%d].name %q: names starting with \"provider:\" are the egress scopes of tool providers", i, t.Name)
		}
	}
	for _, t := range c.Admin.Tenants {
		if len(c.Tenants) > 0 && !tenants[t] {
			bad("admin.tenants: %q is not a configured tenant", t)
		}
	}
}

// providerConfigs are the providers in the provider package's form
// (validated at load).
func (c *Config) providerConfigs() []provider.Config {
	out := make([]provider.Config, 0, len(c.Providers))
	for _, p := range c.Providers {
		pc, _ := p.provider()
		out = append(out, pc)
	}
	return out
}

// providerEgress maps each provider's egress scope to its allowlist.
func (c *Config) providerEgress() map[string]policy.EgressPolicy {
	out := map[string]policy.EgressPolicy{}
	for _, p := range c.Providers {
		if p.Egress != nil {
			out[providerEgressScope(p.Name)] = *p.Egress
		}
	}
	return out
}
