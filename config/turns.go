package config

import (
	"net/netip"
	"net/url"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/tools"
)

// Tools relates the tools directory's files to the built-in tools.
type Tools struct {
	ReplaceBuiltins []string  `yaml:"replace_builtins" default:"none" doc:"the built-in tools a file of tools_dir may replace; a file defining another built-in's name is refused"`
	Idempotent      []string  `yaml:"idempotent" default:"none" doc:"built-in tools marked idempotent: a turn's call whose sandbox died after it may have started is run again (tools spending nothing beyond file_read are anyway)"`
	WebSearch       WebSearch `yaml:"web_search"`
	Cache           ToolCache `yaml:"cache"`
	ReturnDirect    []string  `yaml:"return_direct" default:"none" doc:"built-in tools whose result is the agent's final answer (LangChain return_direct, CrewAI result_as_answer): x-return-direct in the schema exports, return_direct and final_answer in a turn's answer (a tool file or provider tool says return_direct itself)"`
}

// WebSearch configures the web_search tool (alias duckduckgo_search),
// registered only with a backend URL.
type WebSearch struct {
	Backend    WebSearchBackend `yaml:"backend"`
	MaxResults int              `yaml:"max_results" check:"positive" doc:"the ceiling of web_search's count"`
	CacheTTL   time.Duration    `yaml:"cache_ttl" check:"nonnegative" doc:"identical searches of a tenant answer from the result cache (tools.cache) for this long; 0: never cached"`
}

// Hook is an operator's HTTP hook around the calls of some tools: a
// before hook may allow, deny or rewrite a call's arguments, an after
// hook may redact its result (job/hooks.go).
type Hook struct {
	Tenant            string        `yaml:"tenant" default:"every tenant" doc:"the tenant whose calls it sees (empty or *: every tenant)"`
	Tools             string        `yaml:"tools" default:"*" doc:"a glob of tool names (path.Match: *, ?, [a-z])"`
	Before            string        `yaml:"before" default:"none" doc:"POSTed {tool, arguments, tenant, session, effects, job_id} before the call runs, after the guard's own rules; answers {\"action\": \"allow\"|\"deny\", \"reason\", \"arguments\"} (rewritten arguments are validated again)"`
	After             string        `yaml:"after" default:"none" doc:"POSTed the call and its result after it ran; may answer {\"content\": \"...\"} to replace (redact) what the model reads"`
	Secret            string        `yaml:"secret" default:"callbacks.secret" doc:"the HMAC-SHA256 key of the hook requests' X-Sandboxd-Signature (as callbacks)"`
	Timeout           time.Duration `yaml:"timeout" default:"5s" doc:"one hook request"`
	FailOpen          bool          `yaml:"fail_open" default:"false: fail closed" doc:"when a before hook fails (timeout, error, bad answer): run the call anyway (true) or refuse it (false); an after hook that fails leaves the result as it is (true) or withholds it (false)"`
	AllowPrivateCIDRs []string      `yaml:"allow_private_cidrs" default:"none" doc:"private or loopback networks the hook's URLs may be on (never sandboxd's own addresses)"`
}

// Hooks is the hooks list.
type Hooks []Hook

// ToolCache bounds the result cache of tools that cannot change anything
// (calculator, read-only file tools in a session, web_search).
type ToolCache struct {
	MaxEntries     int `yaml:"max_entries" check:"nonnegative" doc:"results kept (least recently used dropped first); 0 disables the cache"`
	MaxResultBytes int `yaml:"max_result_bytes" check:"positive" doc:"a larger result (content and artifact references) is not cached"`
}

// WebSearchBackend is the search endpoint web_search asks.
type WebSearchBackend struct {
	URL    string `yaml:"url" default:"none: no web_search tool" doc:"the search endpoint, http or https (its query string kept; the query is added as q): a DuckDuckGo-like HTML results page or a self-hosted SearXNG instance's /search. Reached in-process like http_request: through the tenant's egress allowlist and address guard (a private or loopback backend needs the tenant's allow_private_cidrs)"`
	Format string `yaml:"format" check:"oneof=html searxng" doc:"html (anchors of class result__a with result__snippet, DuckDuckGo's HTML endpoint) or searxng (format=json)"`
}

// Turns configures the turn executor (POST /v1/tool-calls).
type Turns struct {
	Concurrency  int           `yaml:"concurrency" check:"positive" doc:"the calls of one batch running at once, when every tool in it is parallel-safe outside a session"`
	Retries      int           `yaml:"retries" check:"nonnegative" doc:"more attempts after an infrastructure failure (no sandbox, the sandbox or the provider died), when that cannot do anything twice; 0: none"`
	RetryBackoff time.Duration `yaml:"retry_backoff" check:"positive" doc:"the delay before the first retry, doubling (at most 5s)"`
	Keep         time.Duration `yaml:"keep" check:"positive" doc:"how long a finished batch stays in memory; GET /v1/tool-calls/{id} reads it from the store after that, until retention deletes it with its jobs"`
}

// Provider is an MCP server whose tools join the registry.
type Provider struct {
	Name              string                  `yaml:"name" default:"required" doc:"its tools are <name>__<tool>: 1-32 letters, digits, '-' or '_', no \"__\""`
	Command           []string                `yaml:"command" default:"none" doc:"a stdio server's argv, run inside a sandbox with effects (set command or url)"`
	Env               map[string]string       `yaml:"env" default:"PATH and HOME only" doc:"the stdio server's environment (nothing of the daemon's)"`
	URL               string                  `yaml:"url" default:"none" doc:"a streamable-HTTP server: a public address, or one in allow_private_cidrs, never one of sandboxd's own"`
	AllowPrivateCIDRs []string                `yaml:"allow_private_cidrs" default:"none" doc:"private or loopback networks a url provider may be on"`
	Effects           []tools.Effect          `yaml:"effects" default:"required" doc:"granted to the provider: its sandbox is isolated by them, and they are every tool's at most (the server's annotations may narrow a tool's)"`
	Egress            *policy.EgressPolicy    `yaml:"egress" default:"none: no network" doc:"the allowlist of a stdio provider with the http effect (allow[] of host, ports, methods; allow_private_cidrs)"`
	Image             string                  `yaml:"image" default:"the runner's image" doc:"the stdio server's sandbox image"`
	Workspace         string                  `yaml:"workspace" check:"abspath" default:"one of its own, kept across restarts" doc:"a host directory shown at /workspace (read-only with file_read, read-write with file_write)"`
	ParallelSafe      bool                    `yaml:"parallel_safe" default:"false" doc:"its tools' calls in one batch may run at once (off: they share the one server process)"`
	Tools             map[string]ProviderTool `yaml:"tools" default:"none" doc:"per tool (the server's name): effects (a subset of the provider's), parallel_safe, idempotent"`
	Start             string                  `yaml:"start" default:"lazy" doc:"lazy (at the first tool listing or call) or boot (when sandboxd starts, in the background)"`
	StartTimeout      time.Duration           `yaml:"start_timeout" default:"30s" doc:"one start: sandbox, initialize and tools/list"`
	CallTimeout       time.Duration           `yaml:"call_timeout" default:"5m" doc:"one tool call"`
	RestartBackoff    time.Duration           `yaml:"restart_backoff" default:"1s" doc:"the delay before restarting a provider that died or failed to start, doubling (back to this after 30 s up)"`
	MaxRestartBackoff time.Duration           `yaml:"max_restart_backoff" default:"1m" doc:"the ceiling of restart_backoff's doubling"`
}

// ProviderTool overrides one tool of a provider.
type ProviderTool struct {
	Effects      []tools.Effect `yaml:"effects"`
	ParallelSafe *bool          `yaml:"parallel_safe"`
	Idempotent   bool           `yaml:"idempotent"`
	ReturnDirect bool           `yaml:"return_direct"`
}

// Providers is the providers list.
type Providers []Provider

// ProviderEgressScope is the egress "tenant" of a provider's sandbox:
// its allowlist, audit and metrics go by it (no tenant may be named so).
func ProviderEgressScope(name string) string { return "provider:" + name }

var (
	providerName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	envVarName   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// PrivatePrefixes parses AllowPrivateCIDRs (validated).
func (p Provider) PrivatePrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range p.AllowPrivateCIDRs {
		if pre, err := netip.ParsePrefix(s); err == nil {
			out = append(out, pre.Masked())
		}
	}
	return out
}

// ProviderEgress maps each provider's egress scope to its allowlist.
func (c *Config) ProviderEgress() map[string]policy.EgressPolicy {
	out := map[string]policy.EgressPolicy{}
	for _, p := range c.Providers {
		if p.Egress != nil {
			out[ProviderEgressScope(p.Name)] = *p.Egress
		}
	}
	return out
}

// validateTurns holds the rules of tools_dir and providers.
func (c *Config) validateTurns(bad func(string, ...any)) {
	for i, h := range c.Hooks {
		if h.Before == "" && h.After == "" {
			bad("hooks[%d]: set before, after or both", i)
		}
		for _, k := range []struct{ name, v string }{{"before", h.Before}, {"after", h.After}} {
			if k.v == "" {
				continue
			}
			if u, err := url.Parse(k.v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				bad("hooks[%d].%s %q: must be an http or https URL without credentials", i, k.name, k.v)
			}
		}
		if _, err := path.Match(h.Tools, ""); err != nil {
			bad("hooks[%d].tools %q: not a glob: %v", i, h.Tools, err)
		}
		if h.Timeout < 0 {
			bad("hooks[%d].timeout %q: must not be negative", i, h.Timeout)
		}
		for _, p := range h.AllowPrivateCIDRs {
			if _, err := netip.ParsePrefix(p); err != nil {
				bad("hooks[%d].allow_private_cidrs %q: not a CIDR", i, p)
			}
		}
	}
	if s := c.Tools.WebSearch.Backend.URL; s != "" {
		if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			bad("tools.web_search.backend.url %q: must be an http or https URL without credentials", s)
		}
	}
	for i, t := range c.Tenants {
		if strings.HasPrefix(t.Name, "provider:") {
			bad("tenants[%d].name %q: names starting with \"provider:\" are tool providers' egress scopes", i, t.Name)
		}
	}
	seen := map[string]bool{}
	for i, p := range c.Providers {
		at := func(format string, args ...any) {
			bad("providers[%d] (%q): "+format, append([]any{i, p.Name}, args...)...)
		}
		switch {
		case !providerName.MatchString(p.Name) || strings.Contains(p.Name, "__"):
			at("name: want 1-32 letters, digits, '-' or '_' without \"__\"")
		case seen[strings.ToLower(p.Name)]:
			at("name is used twice")
		}
		seen[strings.ToLower(p.Name)] = true
		switch {
		case len(p.Command) > 0 && p.URL != "":
			at("set command (stdio, in a sandbox) or url (streamable HTTP), not both")
		case len(p.Command) == 0 && p.URL == "":
			at("set command (stdio, in a sandbox) or url (streamable HTTP)")
		case len(p.Command) > 0 && (p.Command[0] == "" || !slices.Contains(p.Effects, tools.EffectExec)):
			at("command: a stdio provider needs a program and the exec effect")
		case p.URL != "" && !strings.HasPrefix(p.URL, "http://") && !strings.HasPrefix(p.URL, "https://"):
			at("url %q: want http(s)://host[:port]/path", p.URL)
		}
		for _, e := range p.Effects {
			if !e.Valid() {
				at("effects: unknown effect %q", e)
			}
		}
		for name, t := range p.Tools {
			for _, e := range t.Effects {
				if !slices.Contains(p.Effects, e) {
					at("tools.%s.effects: %q is not among the provider's effects", name, e)
				}
			}
		}
		for k := range p.Env {
			if !envVarName.MatchString(k) {
				at("env: %q is not a variable name", k)
			}
		}
		for _, s := range p.AllowPrivateCIDRs {
			if _, err := netip.ParsePrefix(s); err != nil {
				at("allow_private_cidrs: %q: %v", s, err)
			}
		}
		if p.Workspace != "" && !filepath.IsAbs(p.Workspace) {
			at("workspace %q: must be an absolute path", p.Workspace)
		}
		if p.Start != "" && p.Start != "lazy" && p.Start != "boot" {
			at("start %q: want lazy or boot", p.Start)
		}
		if p.StartTimeout < 0 || p.CallTimeout < 0 || p.RestartBackoff < 0 || p.MaxRestartBackoff < 0 {
			at("timeouts and backoffs must not be negative")
		}
		if p.Egress != nil {
			tp := policy.TenantPolicy{Egress: *p.Egress}
			if err := tp.Validate(); err != nil {
				at("egress: %v", err)
			}
		}
	}
}
