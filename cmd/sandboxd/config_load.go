package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// serveFlags are the serve subcommand's flags that were set explicitly.
type serveFlags struct {
	Addr, DataDir, Config, LogLevel string
	// Runner picks runner.name; Runtime the container runners' OCI
	// runtime (runner.docker.runtime or runner.containerd.runtime).
	Runner, Runtime string
}

// loadConfig layers defaults, the YAML file (from --config, else
// SANDBOXD_CONFIG), the environment and the flags, then validates.
func loadConfig(fl serveFlags, getenv func(string) string, euid int) (*Config, error) {
	cfg := defaultConfig()
	path := fl.Config
	if path == "" {
		path = getenv("SANDBOXD_CONFIG")
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		if err := decodeYAML(data, &cfg); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := applyEnv(&cfg, getenv); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		dst *string
		v   string
	}{
		{&cfg.Addr, fl.Addr}, {&cfg.DataDir, fl.DataDir}, {&cfg.LogLevel, fl.LogLevel},
		{&cfg.Runner.Name, fl.Runner},
	} {
		if f.v != "" {
			*f.dst = f.v
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
	if cfg.DataDir == "" {
		dir, err := defaultDataDir(getenv, euid)
		if err != nil {
			return nil, err
		}
		cfg.DataDir = dir
	}
	if cfg.Runner.Name == "docker" && cfg.Runner.Docker.AgentPath == "" {
		cfg.Runner.Docker.AgentPath = findAgent(getenv)
	}
	if cfg.Runner.Name == "containerd" && cfg.Runner.Containerd.AgentPath == "" {
		cfg.Runner.Containerd.AgentPath = findAgent(getenv)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

// decodeYAML decodes strictly: unknown keys and more than one document are
// errors. An empty file changes nothing.
func decodeYAML(data []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

// applyEnv reads the SANDBOXD_* variables (see the README's table).
func applyEnv(cfg *Config, getenv func(string) string) error {
	strs := []struct {
		name string
		dst  *string
	}{
		{"SANDBOXD_ADDR", &cfg.Addr},
		{"SANDBOXD_DATA_DIR", &cfg.DataDir},
		{"SANDBOXD_LOG_LEVEL", &cfg.LogLevel},
		{"SANDBOXD_RUNNER", &cfg.Runner.Name},
		{"SANDBOXD_ROOTFS", &cfg.Runner.Local.Rootfs},
		{"SANDBOXD_AGENT_PATH", &cfg.Runner.Docker.AgentPath},
		{"SANDBOXD_AGENT_PATH", &cfg.Runner.Containerd.AgentPath},
		{"SANDBOXD_CONTAINERD_ADDRESS", &cfg.Runner.Containerd.Address},
		{"SANDBOXD_CONTAINERD_NAMESPACE", &cfg.Runner.Containerd.Namespace},
		{"SANDBOXD_CONTAINERD_IMAGE", &cfg.Runner.Containerd.Image},
		{"SANDBOXD_CONTAINERD_RUNTIME", &cfg.Runner.Containerd.Runtime},
		{"SANDBOXD_TOOLS_DIR", &cfg.ToolsDir},
	}
	for _, s := range strs {
		if v := getenv(s.name); v != "" {
			*s.dst = v
		}
	}
	ints := []struct {
		name string
		set  func(int64)
	}{
		{"SANDBOXD_WORKERS", func(n int64) { cfg.Queue.Workers = int(n) }},
		{"SANDBOXD_QUEUE_SIZE", func(n int64) { cfg.Queue.Size = int(n) }},
		{"SANDBOXD_MAX_BODY_BYTES", func(n int64) { cfg.API.MaxBodyBytes = n }},
		{"SANDBOXD_POOL_SIZE", func(n int64) { size := int(n); cfg.Pool.Size = &size }},
		{"SANDBOXD_MAX_SANDBOXES", func(n int64) { cfg.Pool.MaxSandboxes = int(n) }},
		{"SANDBOXD_MAX_SESSIONS_PER_TENANT", func(n int64) { cfg.Sessions.MaxPerTenant = int(n) }},
	}
	for _, i := range ints {
		if v := getenv(i.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return fmt.Errorf("%s=%q: not an integer", i.name, v)
			}
			i.set(n)
		}
	}
	if v := getenv("SANDBOXD_MAX_WAIT"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return fmt.Errorf("SANDBOXD_MAX_WAIT: %w", err)
		}
		cfg.API.MaxWait = Duration(d)
	}
	if v := getenv("SANDBOXD_ALLOW_WEAK"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("SANDBOXD_ALLOW_WEAK=%q: not a boolean", v)
		}
		cfg.Runner.Local.AllowWeak = b
	}
	if v := getenv("SANDBOXD_API_KEYS"); v != "" {
		tenants, err := parseAPIKeys(v)
		if err != nil {
			return err
		}
		cfg.Tenants = tenants
	}
	return nil
}

// parseAPIKeys reads "key1:tenantA,key2:tenantB" (a key without ":tenant"
// belongs to the tenant "default"). It replaces the file's tenants.
func parseAPIKeys(v string) ([]TenantConfig, error) {
	var tenants []TenantConfig
	index := map[string]int{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, tenant := item, defaultTenant
		if i := strings.LastIndex(item, ":"); i >= 0 {
			key, tenant = item[:i], item[i+1:]
		}
		if key == "" || tenant == "" {
			return nil, fmt.Errorf("SANDBOXD_API_KEYS: entry %q is not KEY:TENANT", redact(item))
		}
		i, ok := index[tenant]
		if !ok {
			i = len(tenants)
			index[tenant] = i
			tenants = append(tenants, TenantConfig{Name: tenant})
		}
		tenants[i].APIKeys = append(tenants[i].APIKeys, key)
	}
	return tenants, nil
}

// redact keeps a secret's first two characters, enough to find it.
func redact(s string) string {
	if len(s) <= 2 {
		return "**"
	}
	return s[:2] + strings.Repeat("*", min(len(s)-2, 8))
}

// findAgent looks for the sandbox-agent binary next to this executable,
// then in the directories of PATH (as getenv reports it); "" when none has
// it (validate then explains).
func findAgent(getenv func(string) string) string {
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	dirs = append(dirs, filepath.SplitList(getenv("PATH"))...)
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, "sandbox-agent")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
