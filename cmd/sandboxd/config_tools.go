package main

import (
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/tools/provider"
)

// providerConfigs are the configured providers in the provider package's
// form (config.Validate checked them).
func providerConfigs(cfg *config.Config) []provider.Config {
	out := make([]provider.Config, 0, len(cfg.Providers))
	for _, p := range cfg.Providers {
		c := provider.Config{
			Name: p.Name, Command: p.Command, URL: p.URL, Effects: p.Effects, Image: p.Image, Workspace: p.Workspace,
			AllowPrivate: p.PrivatePrefixes(), ParallelSafe: p.ParallelSafe, Lazy: p.Start != "boot",
			StartTimeout: p.StartTimeout, CallTimeout: p.CallTimeout, Backoff: p.RestartBackoff, MaxBackoff: p.MaxRestartBackoff,
		}
		for k, v := range p.Env {
			c.Env = append(c.Env, k+"="+v)
		}
		slices.Sort(c.Env)
		if len(c.Command) > 0 && !slices.ContainsFunc(c.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
			c.Env = append(c.Env, "PATH=/usr/local/bin:/usr/bin:/bin")
		}
		if len(c.Command) > 0 && !slices.ContainsFunc(c.Env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
			c.Env = append(c.Env, "HOME=/tmp")
		}
		if len(p.Tools) > 0 {
			c.Tools = map[string]provider.ToolConfig{}
			for name, t := range p.Tools {
				c.Tools[name] = provider.ToolConfig{Effects: t.Effects, ParallelSafe: t.ParallelSafe, Idempotent: t.Idempotent, ReturnDirect: t.ReturnDirect}
			}
		}
		out = append(out, c)
	}
	return out
}
