package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/config"
)

// serveFlags are the serve subcommand's flags that were set explicitly.
type serveFlags struct {
	// Config is the YAML file (--config, else SANDBOXD_CONFIG).
	Config string
	// Runtime is the container runners' OCI runtime: runner.docker.runtime
	// or runner.containerd.runtime, by runner.
	Runtime string
	// Set holds the flags of the keys that have one (config.Flags), by
	// flag name.
	Set map[string]string
}

// loadConfig layers config.Defaults(), the YAML file, the environment and
// the flags, fills the defaults that depend on the host, then validates.
func loadConfig(fl serveFlags, getenv func(string) string, euid int) (*config.Config, error) {
	cfg := config.Defaults()
	path := fl.Config
	if path == "" {
		path = getenv("SANDBOXD_CONFIG")
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := config.Decode(data, &cfg); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := cfg.ApplyEnv(getenv); err != nil {
		return nil, err
	}
	for _, k := range config.Flags() { // in key order, whatever the map's
		if v, ok := fl.Set[k.Flag]; ok && v != "" {
			if err := cfg.SetFlag(k.Flag, v); err != nil {
				return nil, err
			}
		}
	}
	if fl.Runtime != "" {
		switch cfg.Runner.Name {
		case "docker":
			cfg.Runner.Docker.Runtime = fl.Runtime
		case "containerd":
			cfg.Runner.Containerd.Runtime = fl.Runtime
		default:
			return nil, fmt.Errorf("--runtime %q: only the docker and containerd runners take a runtime (runner is %q)", fl.Runtime, cfg.Runner.Name)
		}
	}
	if err := cfg.Complete(getenv, euid); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		runner string
		path   *string
		binary string
	}{
		{"docker", &cfg.Runner.Docker.AgentPath, "sandbox-agent"},
		{"containerd", &cfg.Runner.Containerd.AgentPath, "sandbox-agent"},
		{"local", &cfg.Runner.Local.AgentPath, "sandbox-agent"},
		{"local", &cfg.Runner.Local.LauncherPath, "sandbox-launch"},
	} {
		if (cfg.Runner.Name == p.runner || p.runner == "local" && cfg.Runner.Name == "") && *p.path == "" {
			*p.path = findBinary(p.binary, getenv)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// findBinary looks for the binary name (sandbox-agent, sandbox-launch)
// next to this executable, then in the directories of PATH (as getenv
// reports it); "" when none has it (validate or the runner then explains).
func findBinary(name string, getenv func(string) string) string {
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	dirs = append(dirs, filepath.SplitList(getenv("PATH"))...)
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
