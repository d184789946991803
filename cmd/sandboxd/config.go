package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandboxd/sandboxd/policy"
)

// Config is the daemon's configuration. Precedence: flags > environment >
// YAML file > defaults (see loadConfig). Limits are operator values: a
// request may lower them, never raise them above Limits.Ceilings.
type Config struct {
	Addr     string `yaml:"addr"`
	DataDir  string `yaml:"data_dir"`
	LogLevel string `yaml:"log_level"`
	// ShutdownTimeout bounds the graceful shutdown: in-flight requests and
	// running jobs get this long before they are cancelled.
	ShutdownTimeout Duration          `yaml:"shutdown_timeout"`
	Runner          RunnerConfig      `yaml:"runner"`
	Limits          LimitsConfig      `yaml:"limits"`
	Queue           QueueConfig       `yaml:"queue"`
	API             APIConfig         `yaml:"api"`
	Tenants         []TenantConfig    `yaml:"tenants"`
	HTTPRequest     HTTPRequestConfig `yaml:"http_request"`
	Sessions        SessionsConfig    `yaml:"sessions"`
	Pool            PoolConfig        `yaml:"pool"`
	Retention       RetentionConfig   `yaml:"retention"`
	// ToolsDir, Tools, Turns, Providers, Admin: see config_tools.go.
	ToolsDir  string           `yaml:"tools_dir"`
	Tools     ToolsConfig      `yaml:"tools"`
	Turns     TurnsConfig      `yaml:"turns"`
	Providers []ProviderConfig `yaml:"providers"`
	Admin     AdminConfig      `yaml:"admin"`
}

// RetentionConfig bounds what the store keeps of finished jobs (with their
// events and artifacts).
type RetentionConfig struct {
	// MaxAge deletes jobs finished longer ago; 0: no age bound.
	MaxAge Duration `yaml:"max_age"`
	// MaxBytes deletes the earliest finished jobs while the store's
	// records take more; 0: no size bound.
	MaxBytes int64 `yaml:"max_bytes"`
	// Interval is the time between retention passes (and compactions).
	Interval Duration `yaml:"interval"`
}

// SessionsConfig configures sessions (persistent sandboxes).
type SessionsConfig struct {
	// MaxPerTenant bounds a tenant's open sessions (429 past it).
	MaxPerTenant int `yaml:"max_per_tenant"`
	// DefaultTTL is a session's lifetime when the request gives none;
	// MaxTTL caps what a request may ask.
	DefaultTTL Duration `yaml:"default_ttl"`
	MaxTTL     Duration `yaml:"max_ttl"`
	// DefaultIdle closes a session unused that long (request default).
	DefaultIdle Duration `yaml:"default_idle"`
	// ReapInterval is how often expired and idle sessions are closed.
	ReapInterval Duration `yaml:"reap_interval"`
	// MaxFileBytes caps one uploaded file; MaxArchiveBytes an uploaded
	// archive (as sent and unpacked); MaxArchiveEntries its entries.
	MaxFileBytes      int64 `yaml:"max_file_bytes"`
	MaxArchiveBytes   int64 `yaml:"max_archive_bytes"`
	MaxArchiveEntries int   `yaml:"max_archive_entries"`
}

// PoolConfig configures the warm sandbox pool of one-shot jobs.
type PoolConfig struct {
	// Size is the ready sandboxes kept per pooled profile; 0 disables.
	// Unset (nil) means the runner's default, see EffectivePoolSize.
	Size *int `yaml:"size"`
	// MaxSandboxes caps the sandboxes alive (sessions, pooled, in use).
	MaxSandboxes int `yaml:"max_sandboxes"`
}

// RunnerConfig selects and configures the sandbox backend.
type RunnerConfig struct {
	Name   string             `yaml:"name"`
	Local  LocalRunnerConfig  `yaml:"local"`
	Docker DockerRunnerConfig `yaml:"docker"`
	// Containerd configures runner.name: containerd.
	Containerd ContainerdRunnerConfig `yaml:"containerd"`
}

// ContainerdRunnerConfig configures the containerd runner (runner.name:
// containerd); scripts/containerd-setup.sh starts the daemon and imports
// the images.
type ContainerdRunnerConfig struct {
	// Address is containerd's socket (default /run/containerd/containerd.sock).
	Address string `yaml:"address"`
	// Namespace is the containerd namespace of the sandboxes (default sandboxd).
	Namespace string `yaml:"namespace"`
	// Image is the default sandbox image (default sandboxd/python:latest),
	// already imported into Namespace.
	Image string `yaml:"image"`
	// AgentPath is the static sandbox-agent binary mounted into every
	// sandbox. Required.
	AgentPath string `yaml:"agent_path"`
	// Runtime is "" (runc) or runsc (gVisor), or a containerd shim name.
	Runtime string `yaml:"runtime"`
}

// DockerRunnerConfig configures the Docker runner (runner.name: docker).
type DockerRunnerConfig struct {
	// Host is the Docker daemon address (default DOCKER_HOST, else the
	// local socket).
	Host string `yaml:"host"`
	// Image is the default sandbox image (default sandboxd/python:latest).
	Image string `yaml:"image"`
	// AgentPath is the static sandbox-agent binary mounted into every
	// sandbox. Required.
	AgentPath string `yaml:"agent_path"`
	// Runtime is the OCI runtime ("" the daemon's default; runsc for gVisor).
	Runtime string `yaml:"runtime"`
}

// LocalRunnerConfig configures the local (namespaces + cgroups) runner.
type LocalRunnerConfig struct {
	// Rootfs is an unpacked image bound read-only as the sandbox root;
	// empty means a read-only view of the host's system directories.
	Rootfs string `yaml:"rootfs"`
	// AllowWeak runs sandboxes even when this host lacks some isolation
	// feature (logged on every sandbox). Off: such sandboxes are refused.
	AllowWeak bool `yaml:"allow_weak"`
}

// LimitsConfig holds the per-job defaults and the operator's ceilings.
type LimitsConfig struct {
	Defaults LimitValues `yaml:"defaults"`
	Ceilings LimitValues `yaml:"ceilings"`
}

// LimitValues are sandbox resource limits; zero means unset.
type LimitValues struct {
	MemoryBytes   int64    `yaml:"memory_bytes"`
	PIDs          int64    `yaml:"pids"`
	CPUMillis     int64    `yaml:"cpu_millis"`
	Timeout       Duration `yaml:"timeout"`
	OutputBytes   int64    `yaml:"output_bytes"`
	NoFile        int64    `yaml:"nofile"`
	FileSizeBytes int64    `yaml:"file_size_bytes"`
}

// QueueConfig sizes admission.
type QueueConfig struct {
	Size    int `yaml:"size"`
	Workers int `yaml:"workers"`
}

// APIConfig tunes the HTTP API.
type APIConfig struct {
	MaxBodyBytes int64    `yaml:"max_body_bytes"`
	MaxWait      Duration `yaml:"max_wait"`
}

// TenantConfig names a tenant and the API keys that authenticate as it.
type TenantConfig struct {
	Name    string   `yaml:"name"`
	APIKeys []string `yaml:"api_keys"`
	// Policy is the tenant's guard policy (rules, budgets, tool limits,
	// rate limit, approvals, egress allowlist); nil: every call allowed
	// and no egress at all.
	Policy *policy.TenantPolicy `yaml:"policy"`
	// Images are the images (references on the container runners, rootfs
	// paths on the local runner) the tenant's sessions may name besides
	// the runner's configured image; empty: that image only.
	Images []string `yaml:"images"`
}

// TenantImages maps each tenant with images to them (job.Config.Images).
func (c *Config) TenantImages() map[string][]string {
	out := map[string][]string{}
	for _, t := range c.Tenants {
		if len(t.Images) > 0 {
			out[t.Name] = t.Images
		}
	}
	return out
}

// Policies maps each tenant with a policy to it.
func (c *Config) Policies() map[string]policy.TenantPolicy {
	out := map[string]policy.TenantPolicy{}
	for _, t := range c.Tenants {
		if t.Policy != nil {
			out[t.Name] = *t.Policy
		}
	}
	return out
}

// HTTPRequestConfig caps the http_request tool (zero: the tool's defaults).
type HTTPRequestConfig struct {
	MaxResponseBytes int64    `yaml:"max_response_bytes"`
	Timeout          Duration `yaml:"timeout"`
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration time.Duration

// UnmarshalYAML reads "1m30s" (or 0).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a duration like \"30s\"", n.Line)
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q (want e.g. \"30s\", \"5m\")", s)
	}
	return v, nil
}

// Defaults.
const (
	defaultAddr            = "127.0.0.1:8080"
	defaultLogLevel        = "info"
	defaultRunner          = "local"
	defaultQueueSize       = 1024
	defaultWorkers         = 16
	defaultMaxBodyBytes    = 1 << 20
	defaultMaxWait         = 5 * time.Minute
	defaultShutdownTimeout = 30 * time.Second
	// defaultTenant serves every request when no API keys are configured.
	defaultTenant = "default"
)

func defaultConfig() Config {
	return Config{
		Addr:            defaultAddr,
		LogLevel:        defaultLogLevel,
		ShutdownTimeout: Duration(defaultShutdownTimeout),
		Queue:           QueueConfig{Size: defaultQueueSize, Workers: defaultWorkers},
		API:             APIConfig{MaxBodyBytes: defaultMaxBodyBytes, MaxWait: Duration(defaultMaxWait)},
		Sessions: SessionsConfig{
			MaxPerTenant: 10, DefaultTTL: Duration(time.Hour), MaxTTL: Duration(24 * time.Hour),
			DefaultIdle: Duration(10 * time.Minute), ReapInterval: Duration(5 * time.Second),
			MaxFileBytes: 64 << 20, MaxArchiveBytes: 256 << 20, MaxArchiveEntries: 10000,
		},
		Pool: PoolConfig{MaxSandboxes: 64},
		Retention: RetentionConfig{MaxAge: Duration(7 * 24 * time.Hour), MaxBytes: 1 << 30,
			Interval: Duration(time.Minute)},
		Runner: RunnerConfig{Name: defaultRunner},
		Turns: TurnsConfig{Concurrency: 8, Retries: 2, RetryBackoff: Duration(100 * time.Millisecond),
			Keep: Duration(time.Hour)},
	}
}

// defaultDataDir is /var/lib/sandboxd for root, else
// $XDG_DATA_HOME/sandboxd, else $HOME/.local/share/sandboxd.
func defaultDataDir(getenv func(string) string, euid int) (string, error) {
	if euid == 0 {
		return "/var/lib/sandboxd", nil
	}
	if x := getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "sandboxd"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "sandboxd"), nil
	}
	return "", errors.New("no data directory: set --data-dir, SANDBOXD_DATA_DIR or data_dir (HOME is not set)")
}

// APIKeys maps each API key to its tenant.
func (c *Config) APIKeys() map[string]string {
	keys := map[string]string{}
	for _, t := range c.Tenants {
		for _, k := range t.APIKeys {
			keys[k] = t.Name
		}
	}
	return keys
}

// EffectivePoolSize is pool.size, or by default 2 for container runners
// (creating a container costs ~200 ms) and 0 for the local runner: there a
// sandbox costs ~2 ms to create, less than a background refill competing
// with the next job for this machine's cores.
func (c *Config) EffectivePoolSize() int {
	switch {
	case c.Pool.Size != nil:
		return *c.Pool.Size
	case c.Runner.Name == "local" || c.Runner.Name == "":
		return 0
	default:
		return 2
	}
}
