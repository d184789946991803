package main

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/fake"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sandboxd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const fullYAML = `
addr: 127.0.0.1:9000
data_dir: /srv/sandboxd
log_level: debug
shutdown_timeout: 10s
runner:
  name: local
  local: {rootfs: /srv/rootfs, allow_weak: true}
limits:
  defaults: {memory_bytes: 268435456, pids: 64, cpu_millis: 500, timeout: 30s, output_bytes: 65536}
  ceilings: {memory_bytes: 1073741824, pids: 256, cpu_millis: 2000, timeout: 10m, output_bytes: 1048576, nofile: 4096, file_size_bytes: 104857600}
queue: {size: 10, workers: 2}
api: {max_body_bytes: 2048, max_wait: 1m}
tenants:
  - name: alice
    api_keys: [key-alice-1, key-alice-2]
  - name: bob
    api_keys: [key-bob]
    images: [/srv/rootfs-data, /srv/rootfs-r]
http_request: {max_response_bytes: 1000, timeout: 5s}
`

func TestConfigFull(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(serveFlags{Config: writeConfig(t, fullYAML)}, envMap(nil), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:9000" || cfg.DataDir != "/srv/sandboxd" || cfg.LogLevel != "debug" ||
		time.Duration(cfg.ShutdownTimeout) != 10*time.Second || !cfg.Runner.Local.AllowWeak ||
		cfg.Runner.Local.Rootfs != "/srv/rootfs" || cfg.Queue != (QueueConfig{Size: 10, Workers: 2}) ||
		cfg.API.MaxBodyBytes != 2048 || time.Duration(cfg.API.MaxWait) != time.Minute ||
		cfg.HTTPRequest.MaxResponseBytes != 1000 || time.Duration(cfg.HTTPRequest.Timeout) != 5*time.Second {
		t.Fatalf("config %+v", cfg)
	}
	if d := cfg.Limits.Defaults.runner(); d.Timeout != 30*time.Second || d.MemoryBytes != 256<<20 || d.PIDs != 64 {
		t.Fatalf("defaults %+v", d)
	}
	if c := cfg.Limits.Ceilings.runner(); c.Timeout != 10*time.Minute || c.NoFile != 4096 || c.FileSize != 100<<20 {
		t.Fatalf("ceilings %+v", c)
	}
	if im := cfg.TenantImages(); len(im) != 1 || strings.Join(im["bob"], ",") != "/srv/rootfs-data,/srv/rootfs-r" {
		t.Fatalf("images %v", im)
	}
	keys := cfg.APIKeys()
	if len(keys) != 3 || keys["key-alice-2"] != "alice" || keys["key-bob"] != "bob" {
		t.Fatalf("keys %v", keys)
	}
}

func TestEffectiveLimits(t *testing.T) {
	t.Parallel()
	cfg := defaultConfig()
	d, c := cfg.EffectiveLimits()
	if d != builtinDefaults || c != builtinCeilings {
		t.Fatalf("built-in: %+v %+v", d, c)
	}
	cfg.Limits.Ceilings = LimitValues{MemoryBytes: 128 << 20, Timeout: Duration(time.Hour)}
	cfg.Limits.Defaults = LimitValues{PIDs: 32}
	d, c = cfg.EffectiveLimits()
	if d.MemoryBytes != 128<<20 || c.MemoryBytes != 128<<20 || d.PIDs != 32 || c.PIDs != builtinCeilings.PIDs ||
		time.Duration(d.Timeout) != time.Minute || time.Duration(c.Timeout) != time.Hour {
		t.Fatalf("lowered: %+v %+v", d, c)
	}
	// The disk limit: 1 GiB and 65536 inodes by default, a lower ceiling
	// lowers the default.
	if d.DiskBytes != 1<<30 || d.DiskInodes != 65536 || c.DiskBytes != 8<<30 {
		t.Fatalf("disk: %+v %+v", d, c)
	}
	cfg.Limits.Ceilings.DiskBytes = 256 << 20
	if d, _ = cfg.EffectiveLimits(); d.DiskBytes != 256<<20 || d.runner().DiskBytes != 256<<20 {
		t.Fatalf("disk default under a 256 MiB ceiling: %+v", d)
	}
}

func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "addr: 127.0.0.1:1111\ndata_dir: /from/file\nlog_level: warn\nqueue: {workers: 3}\n")
	other := writeConfig(t, "addr: 127.0.0.1:2222\n")
	for _, tc := range []struct {
		name  string
		flags serveFlags
		env   map[string]string
		euid  int
		check func(*Config) bool
	}{
		{"defaults", serveFlags{}, map[string]string{"HOME": "/home/u"}, 1000, func(c *Config) bool {
			return c.Addr == defaultAddr && c.DataDir == "/home/u/.local/share/sandboxd" && c.LogLevel == "info" &&
				c.Queue.Workers == defaultWorkers && c.Queue.Size == defaultQueueSize && c.Runner.Name == "local" &&
				time.Duration(c.API.MaxWait) == defaultMaxWait && c.API.MaxBodyBytes == defaultMaxBodyBytes
		}},
		{"xdg data home", serveFlags{}, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/xdg"}, 1000, func(c *Config) bool {
			return c.DataDir == "/xdg/sandboxd"
		}},
		{"root data dir", serveFlags{}, map[string]string{"HOME": "/root"}, 0, func(c *Config) bool {
			return c.DataDir == "/var/lib/sandboxd"
		}},
		{"file over defaults", serveFlags{Config: file}, nil, 1000, func(c *Config) bool {
			return c.Addr == "127.0.0.1:1111" && c.DataDir == "/from/file" && c.LogLevel == "warn" &&
				c.Queue.Workers == 3 && c.Queue.Size == defaultQueueSize
		}},
		{"config from env", serveFlags{}, map[string]string{"SANDBOXD_CONFIG": file}, 1000, func(c *Config) bool {
			return c.Addr == "127.0.0.1:1111"
		}},
		{"config flag over env", serveFlags{Config: other}, map[string]string{"SANDBOXD_CONFIG": file, "HOME": "/h"}, 1000, func(c *Config) bool {
			return c.Addr == "127.0.0.1:2222"
		}},
		{"env over file", serveFlags{Config: file}, map[string]string{
			"SANDBOXD_ADDR": "127.0.0.1:3333", "SANDBOXD_DATA_DIR": "/from/env", "SANDBOXD_LOG_LEVEL": "error",
			"SANDBOXD_WORKERS": "7", "SANDBOXD_QUEUE_SIZE": "70", "SANDBOXD_MAX_WAIT": "20s",
			"SANDBOXD_MAX_BODY_BYTES": "4096", "SANDBOXD_RUNNER": "local", "SANDBOXD_ROOTFS": "/rootfs",
			"SANDBOXD_ALLOW_WEAK": "true",
		}, 1000, func(c *Config) bool {
			return c.Addr == "127.0.0.1:3333" && c.DataDir == "/from/env" && c.LogLevel == "error" &&
				c.Queue.Workers == 7 && c.Queue.Size == 70 && time.Duration(c.API.MaxWait) == 20*time.Second &&
				c.API.MaxBodyBytes == 4096 && c.Runner.Local.Rootfs == "/rootfs" && c.Runner.Local.AllowWeak
		}},
		{"flags over env", serveFlags{Config: file, Addr: "127.0.0.1:4444", DataDir: "/from/flag", LogLevel: "debug"},
			map[string]string{"SANDBOXD_ADDR": "127.0.0.1:3333", "SANDBOXD_DATA_DIR": "/from/env", "SANDBOXD_LOG_LEVEL": "error"}, 1000,
			func(c *Config) bool {
				return c.Addr == "127.0.0.1:4444" && c.DataDir == "/from/flag" && c.LogLevel == "debug"
			}},
		{"env api keys replace file tenants", serveFlags{Config: writeConfig(t, "data_dir: /d\ntenants: [{name: x, api_keys: [kx]}]\n")},
			map[string]string{"SANDBOXD_API_KEYS": "key1:tenantA, key2:tenantB,key3:tenantA,solo"}, 1000, func(c *Config) bool {
				k := c.APIKeys()
				return len(k) == 4 && k["key1"] == "tenantA" && k["key3"] == "tenantA" && k["key2"] == "tenantB" &&
					k["solo"] == defaultTenant && k["kx"] == ""
			}},
		{"pool off by default on the local runner", serveFlags{DataDir: "/d"}, nil, 1000,
			func(c *Config) bool { return c.Pool.Size == nil && c.EffectivePoolSize() == 0 }},
		{"pool of 2 by default on the docker runner", serveFlags{DataDir: "/d"}, map[string]string{"SANDBOXD_RUNNER": "docker", "SANDBOXD_AGENT_PATH": "/a"}, 1000,
			func(c *Config) bool { return c.EffectivePoolSize() == 2 }},
		{"pool size from env", serveFlags{DataDir: "/d"}, map[string]string{"SANDBOXD_POOL_SIZE": "5"}, 1000,
			func(c *Config) bool { return c.EffectivePoolSize() == 5 }},
		{"docker runner from env", serveFlags{DataDir: "/d"}, map[string]string{"SANDBOXD_RUNNER": "docker", "SANDBOXD_AGENT_PATH": "/opt/sandbox-agent"}, 1000,
			func(c *Config) bool {
				return c.Runner.Name == "docker" && c.Runner.Docker.AgentPath == "/opt/sandbox-agent"
			}},
		{"runner and runtime flags over env", serveFlags{DataDir: "/d", Runner: "containerd", Runtime: "runsc"},
			map[string]string{"SANDBOXD_RUNNER": "docker", "SANDBOXD_AGENT_PATH": "/a", "SANDBOXD_CONTAINERD_RUNTIME": "runc"}, 1000,
			func(c *Config) bool {
				return c.Runner.Name == "containerd" && c.Runner.Containerd.Runtime == "runsc" &&
					c.Runner.Docker.Runtime == "" && c.Runner.Containerd.AgentPath == "/a"
			}},
		{"runtime flag for docker", serveFlags{DataDir: "/d", Runner: "docker", Runtime: "runsc"}, map[string]string{"SANDBOXD_AGENT_PATH": "/a"}, 1000,
			func(c *Config) bool { return c.Runner.Docker.Runtime == "runsc" && c.Runner.Containerd.Runtime == "" }},
		{"keys allow any address", serveFlags{Addr: "0.0.0.0:8080", DataDir: "/d"}, map[string]string{"SANDBOXD_API_KEYS": "k:t"}, 1000,
			func(c *Config) bool { return c.Addr == "0.0.0.0:8080" }},
		{"localhost without keys", serveFlags{Addr: "localhost:8080", DataDir: "/d"}, nil, 1000,
			func(c *Config) bool { return c.Addr == "localhost:8080" }},
		{"ipv6 loopback without keys", serveFlags{Addr: "[::1]:8080", DataDir: "/d"}, nil, 1000,
			func(c *Config) bool { return c.Addr == "[::1]:8080" }},
		{"empty file", serveFlags{Config: writeConfig(t, "# nothing\n"), DataDir: "/d"}, nil, 1000,
			func(c *Config) bool { return c.Addr == defaultAddr }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := loadConfig(tc.flags, envMap(tc.env), tc.euid)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Fatalf("config %+v", cfg)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		yaml  string
		flags serveFlags
		env   map[string]string
		want  []string // substrings of the error
	}{
		{name: "unknown key", yaml: "adress: x\n", want: []string{"adress"}},
		{name: "unknown nested key", yaml: "queue: {size: 1, wokers: 2}\n", want: []string{"wokers"}},
		{name: "bad duration", yaml: "api: {max_wait: 5 minutes}\n", want: []string{`"5 minutes"`, "line 1"}},
		{name: "wrong type", yaml: "queue: {size: many}\n", want: []string{"many"}},
		{name: "two documents", yaml: "addr: 127.0.0.1:1\n---\naddr: 127.0.0.1:2\n", want: []string{"more than one"}},
		{name: "missing file", flags: serveFlags{Config: "/nonexistent/sandboxd.yaml"}, want: []string{"/nonexistent/sandboxd.yaml"}},
		{name: "bad addr", flags: serveFlags{Addr: "8080"}, want: []string{`addr "8080"`}},
		{name: "bad port", flags: serveFlags{Addr: "127.0.0.1:http2"}, want: []string{`port "http2"`}},
		{name: "bad log level", flags: serveFlags{LogLevel: "loud"}, want: []string{`log_level "loud"`}},
		{name: "relative data dir", flags: serveFlags{DataDir: "data"}, want: []string{`data_dir "data"`}},
		{name: "unknown runner", env: map[string]string{"SANDBOXD_RUNNER": "firecracker"}, want: []string{`runner.name "firecracker"`}},
		{name: "unknown runner flag", flags: serveFlags{Runner: "firecracker"}, want: []string{`runner.name "firecracker"`}},
		{name: "runtime for the local runner", flags: serveFlags{Runtime: "runsc"}, want: []string{`--runtime "runsc"`, `runner is "local"`}},
		{name: "relative rootfs", yaml: "runner: {local: {rootfs: rootfs}}\n", want: []string{`runner.local.rootfs "rootfs"`}},
		{name: "docker without agent", yaml: "runner: {name: docker}\n", want: []string{`runner.docker.agent_path ""`}},
		{name: "bad sessions", yaml: "sessions: {max_per_tenant: 0, default_ttl: 2h, max_ttl: 1h, max_file_bytes: -1}\n",
			want: []string{"sessions.max_per_tenant 0", `sessions.default_ttl "2h0m0s": exceeds`, "sessions.max_file_bytes -1"}},
		{name: "bad pool", yaml: "pool: {size: -1, max_sandboxes: 0}\n", want: []string{"pool.size -1", "pool.max_sandboxes 0"}},
		{name: "negative limit", yaml: "limits: {ceilings: {pids: -1}}\n", want: []string{"limits.ceilings.pids -1"}},
		{name: "default above ceiling", yaml: "limits: {defaults: {timeout: 2m}, ceilings: {timeout: 1m}}\n",
			want: []string{`limits.defaults.timeout "2m0s" is above limits.ceilings.timeout "1m0s"`}},
		{name: "default above built-in ceiling", yaml: "limits: {defaults: {memory_bytes: 8589934592}}\n",
			want: []string{"limits.defaults.memory_bytes 8589934592 is above limits.ceilings.memory_bytes 4294967296"}},
		{name: "disk limits below the minimum", yaml: "limits: {defaults: {disk_inodes: 100}, ceilings: {disk_bytes: 1048576}}\n",
			want: []string{"limits.ceilings.disk_bytes 1048576: must be at least 16777216", "limits.defaults.disk_inodes 100: must be at least 128"}},
		{name: "disk default above the ceiling", yaml: "limits: {defaults: {disk_bytes: 17179869184}}\n",
			want: []string{"limits.defaults.disk_bytes 17179869184 is above limits.ceilings.disk_bytes 8589934592"}},
		{name: "zero workers", yaml: "queue: {workers: 0}\n", want: []string{"queue.workers 0"}},
		{name: "zero max wait", yaml: "api: {max_wait: 0}\n", want: []string{"api.max_wait"}},
		{name: "several problems", yaml: "queue: {size: -1, workers: -2}\n", want: []string{"queue.size -1", "queue.workers -2"}},
		{name: "tenant without keys", yaml: "tenants: [{name: a}]\n", want: []string{`tenants[0] ("a"): no api_keys`}},
		{name: "empty image", yaml: "tenants: [{name: a, api_keys: [k1], images: [sandboxd/x, \"\"]}]\n", want: []string{`tenants[0] ("a"): images[1] ""`}},
		{name: "duplicate tenant", yaml: "tenants: [{name: a, api_keys: [k1]}, {name: a, api_keys: [k2]}]\n", want: []string{`"a": duplicate`}},
		{name: "shared key", yaml: "tenants: [{name: a, api_keys: [secret1]}, {name: b, api_keys: [secret1]}]\n",
			want: []string{`also a key of tenant "a"`, `"se*****"`}},
		{name: "env bad int", env: map[string]string{"SANDBOXD_WORKERS": "lots"}, want: []string{`SANDBOXD_WORKERS="lots"`}},
		{name: "env bad bool", env: map[string]string{"SANDBOXD_ALLOW_WEAK": "maybe"}, want: []string{`SANDBOXD_ALLOW_WEAK="maybe"`}},
		{name: "env bad duration", env: map[string]string{"SANDBOXD_MAX_WAIT": "soon"}, want: []string{`"soon"`}},
		{name: "env bad keys", env: map[string]string{"SANDBOXD_API_KEYS": "key1:"}, want: []string{"KEY:TENANT"}},
		{name: "non-loopback without keys", flags: serveFlags{Addr: "0.0.0.0:8080"}, want: []string{`addr "0.0.0.0:8080" is not a loopback address`, "api_keys"}},
		{name: "all interfaces without keys", flags: serveFlags{Addr: ":8080"}, want: []string{"not a loopback"}},
		{name: "public ip without keys", flags: serveFlags{Addr: "192.0.2.1:8080"}, want: []string{"not a loopback"}},
		{name: "no home", flags: serveFlags{}, env: map[string]string{}, want: []string{"--data-dir"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fl := tc.flags
			if tc.yaml != "" {
				fl.Config = writeConfig(t, tc.yaml)
			}
			env := map[string]string{"HOME": "/home/u"}
			if tc.env != nil {
				env = tc.env
				if _, ok := env["HOME"]; !ok && tc.name != "no home" {
					env["HOME"] = "/home/u"
				}
			}
			_, err := loadConfig(fl, envMap(env), 1000)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestFindAgentOnPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	agent := filepath.Join(dir, "sandbox-agent")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PATH": "relative/dir:" + dir}
	if got := findAgent(func(k string) string { return env[k] }); got != agent {
		t.Fatalf("findAgent = %q, want %q", got, agent)
	}
	if got := findAgent(func(string) string { return "" }); got != "" {
		t.Fatalf("findAgent without PATH = %q", got)
	}
}

// The example policy in examples/ loads and validates.
func TestExamplePolicy(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(serveFlags{Config: "../../examples/policy.yaml"}, envMap(map[string]string{"HOME": t.TempDir()}), 1000)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policies()["alice"]
	if len(p.Rules) != 2 || len(p.Budgets) != 2 || len(p.ToolLimits) != 1 || p.RateLimit == nil || len(p.Egress.Allow) != 3 {
		t.Fatalf("policy %+v", p)
	}
}

// daemonRunner is a runner that depends on a daemon at addr.
type daemonRunner struct {
	*fake.Runner
	addr string
}

func (d daemonRunner) Dependencies() []string { return []string{d.addr} }

func TestProtectedAddrs(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		addr, dep string
		want      map[string]string // address -> what protects it ("" none)
	}{
		{"127.0.0.1:8080", "", map[string]string{"127.0.0.1:8080": "API", "[::1]:8080": "API", "127.0.0.1:8081": ""}},
		{":9000", "", map[string]string{"127.0.0.1:9000": "API", "[::1]:9000": "API", "0.0.0.0:9000": "API", "198.51.100.1:9000": ""}},
		{"[::1]:8080", "tcp://198.51.100.7:2376", map[string]string{"[::1]:8080": "API", "198.51.100.7:2376": "fake daemon", "198.51.100.7:2375": ""}},
		{"127.0.0.1:8080", "tcp://127.0.0.1:2375", map[string]string{"127.0.0.1:2375": "fake daemon"}},
		{"127.0.0.1:8080", "unix:///var/run/docker.sock", map[string]string{"127.0.0.1:8080": "API"}},
		{"127.0.0.1:0", "", map[string]string{"127.0.0.1:0": ""}},
		{"bad", "", map[string]string{"127.0.0.1:80": ""}},
	} {
		var r runner.Runner = fake.New()
		if tc.dep != "" {
			r = daemonRunner{fake.New(), tc.dep}
		}
		p := protectedAddrs(t.Context(), &Config{Addr: tc.addr}, r, log)
		for a, want := range tc.want {
			if got := p.Which(netip.MustParseAddrPort(a)); got != want {
				t.Errorf("addr %q dep %q: %s is %q, want %q (set %s)", tc.addr, tc.dep, a, got, want, p)
			}
		}
	}
}
