package main

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/config"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/containerd"
	"github.com/sandboxd/sandboxd/runner/docker"
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
		cfg.ShutdownTimeout != 10*time.Second || !cfg.Runner.Local.AllowWeak ||
		cfg.Runner.Local.Rootfs != "/srv/rootfs" || cfg.Queue != (config.Queue{Size: 10, Workers: 2}) ||
		cfg.API.MaxBodyBytes != 2048 || cfg.API.MaxWait != time.Minute ||
		cfg.HTTPRequest.MaxResponseBytes != 1000 || cfg.HTTPRequest.Timeout != 5*time.Second {
		t.Fatalf("config %+v", cfg)
	}
	if d := cfg.Limits.Defaults; d.Timeout != 30*time.Second || d.MemoryBytes != 256<<20 || d.PIDs != 64 {
		t.Fatalf("defaults %+v", d)
	}
	if c := cfg.Limits.Ceilings; c.Timeout != 10*time.Minute || c.NoFile != 4096 || c.FileSize != 100<<20 {
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

func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	file := writeConfig(t, "addr: 127.0.0.1:1111\ndata_dir: /from/file\nlog_level: warn\nqueue: {workers: 3}\n")
	other := writeConfig(t, "addr: 127.0.0.1:2222\n")
	for _, tc := range []struct {
		name  string
		flags serveFlags
		env   map[string]string
		euid  int
		check func(*config.Config) bool
	}{
		{"defaults", serveFlags{}, map[string]string{"HOME": "/home/u"}, 1000, func(c *config.Config) bool {
			return c.Addr == config.Defaults().Addr && c.DataDir == "/home/u/.local/share/sandboxd" && c.LogLevel == "info" &&
				c.Queue == config.Defaults().Queue && c.Runner.Name == "local" &&
				c.API == config.Defaults().API && c.MetricsAddr == "127.0.0.1:9464"
		}},
		{"xdg data home", serveFlags{}, map[string]string{"HOME": "/home/u", "XDG_DATA_HOME": "/xdg"}, 1000, func(c *config.Config) bool {
			return c.DataDir == "/xdg/sandboxd"
		}},
		{"root data dir", serveFlags{}, map[string]string{"HOME": "/root"}, 0, func(c *config.Config) bool {
			return c.DataDir == "/var/lib/sandboxd"
		}},
		{"file over defaults", serveFlags{Config: file}, nil, 1000, func(c *config.Config) bool {
			return c.Addr == "127.0.0.1:1111" && c.DataDir == "/from/file" && c.LogLevel == "warn" &&
				c.Queue.Workers == 3 && c.Queue.Size == config.Defaults().Queue.Size
		}},
		{"config from env", serveFlags{}, map[string]string{"SANDBOXD_CONFIG": file}, 1000, func(c *config.Config) bool {
			return c.Addr == "127.0.0.1:1111"
		}},
		{"config flag over env", serveFlags{Config: other}, map[string]string{"SANDBOXD_CONFIG": file, "HOME": "/h"}, 1000, func(c *config.Config) bool {
			return c.Addr == "127.0.0.1:2222"
		}},
		{"env over file", serveFlags{Config: file}, map[string]string{
			"SANDBOXD_ADDR": "127.0.0.1:3333", "SANDBOXD_DATA_DIR": "/from/env", "SANDBOXD_LOG_LEVEL": "error",
			"SANDBOXD_WORKERS": "7", "SANDBOXD_QUEUE_SIZE": "70", "SANDBOXD_MAX_WAIT": "20s",
			"SANDBOXD_MAX_BODY_BYTES": "4096", "SANDBOXD_RUNNER": "local", "SANDBOXD_ROOTFS": "/rootfs",
			"SANDBOXD_ALLOW_WEAK": "true",
		}, 1000, func(c *config.Config) bool {
			return c.Addr == "127.0.0.1:3333" && c.DataDir == "/from/env" && c.LogLevel == "error" &&
				c.Queue.Workers == 7 && c.Queue.Size == 70 && c.API.MaxWait == 20*time.Second &&
				c.API.MaxBodyBytes == 4096 && c.Runner.Local.Rootfs == "/rootfs" && c.Runner.Local.AllowWeak
		}},
		{"flags over env", serveFlags{Config: file, Set: map[string]string{"addr": "127.0.0.1:4444", "data-dir": "/from/flag", "log-level": "debug"}},
			map[string]string{"SANDBOXD_ADDR": "127.0.0.1:3333", "SANDBOXD_DATA_DIR": "/from/env", "SANDBOXD_LOG_LEVEL": "error"}, 1000,
			func(c *config.Config) bool {
				return c.Addr == "127.0.0.1:4444" && c.DataDir == "/from/flag" && c.LogLevel == "debug"
			}},
		{"env api keys replace file tenants", serveFlags{Config: writeConfig(t, "data_dir: /d\ntenants: [{name: x, api_keys: [kx]}]\n")},
			map[string]string{"SANDBOXD_API_KEYS": "key1:tenantA, key2:tenantB,key3:tenantA,solo"}, 1000, func(c *config.Config) bool {
				k := c.APIKeys()
				return len(k) == 4 && k["key1"] == "tenantA" && k["key3"] == "tenantA" && k["key2"] == "tenantB" &&
					k["solo"] == config.DefaultTenant && k["kx"] == ""
			}},
		{"pool of 2 by default on the local runner", serveFlags{Set: map[string]string{"data-dir": "/d"}}, nil, 1000,
			func(c *config.Config) bool { return *c.Pool.Size == 2 }},
		{"pool of 2 by default on the docker runner", serveFlags{Set: map[string]string{"data-dir": "/d"}}, map[string]string{"SANDBOXD_RUNNER": "docker", "SANDBOXD_AGENT_PATH": "/a"}, 1000,
			func(c *config.Config) bool { return *c.Pool.Size == 2 }},
		{"pool size from env", serveFlags{Set: map[string]string{"data-dir": "/d"}}, map[string]string{"SANDBOXD_POOL_SIZE": "5"}, 1000,
			func(c *config.Config) bool { return *c.Pool.Size == 5 }},
		{"docker runner from env", serveFlags{Set: map[string]string{"data-dir": "/d"}}, map[string]string{"SANDBOXD_RUNNER": "docker", "SANDBOXD_AGENT_PATH": "/opt/sandbox-agent"}, 1000,
			func(c *config.Config) bool {
				return c.Runner.Name == "docker" && c.Runner.Docker.AgentPath == "/opt/sandbox-agent"
			}},
		{"runner and runtime flags over env", serveFlags{Runtime: "runsc", Set: map[string]string{"data-dir": "/d", "runner": "containerd"}},
			map[string]string{"SANDBOXD_RUNNER": "docker", "SANDBOXD_AGENT_PATH": "/a", "SANDBOXD_CONTAINERD_RUNTIME": "runc"}, 1000,
			func(c *config.Config) bool {
				return c.Runner.Name == "containerd" && c.Runner.Containerd.Runtime == "runsc" &&
					c.Runner.Docker.Runtime == "" && c.Runner.Containerd.AgentPath == "/a"
			}},
		{"runtime flag for docker", serveFlags{Runtime: "runsc", Set: map[string]string{"data-dir": "/d", "runner": "docker"}}, map[string]string{"SANDBOXD_AGENT_PATH": "/a"}, 1000,
			func(c *config.Config) bool {
				return c.Runner.Docker.Runtime == "runsc" && c.Runner.Containerd.Runtime == ""
			}},
		{"keys allow any address", serveFlags{Set: map[string]string{"addr": "0.0.0.0:8080", "data-dir": "/d"}}, map[string]string{"SANDBOXD_API_KEYS": "k:t"}, 1000,
			func(c *config.Config) bool { return c.Addr == "0.0.0.0:8080" }},
		{"localhost without keys", serveFlags{Set: map[string]string{"addr": "localhost:8080", "data-dir": "/d"}}, nil, 1000,
			func(c *config.Config) bool { return c.Addr == "localhost:8080" }},
		{"ipv6 loopback without keys", serveFlags{Set: map[string]string{"addr": "[::1]:8080", "data-dir": "/d"}}, nil, 1000,
			func(c *config.Config) bool { return c.Addr == "[::1]:8080" }},
		{"empty file", serveFlags{Config: writeConfig(t, "# nothing\n"), Set: map[string]string{"data-dir": "/d"}}, nil, 1000,
			func(c *config.Config) bool { return c.Addr == config.Defaults().Addr }},
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
		{name: "bad addr", flags: serveFlags{Set: map[string]string{"addr": "8080"}}, want: []string{`addr "8080"`}},
		{name: "bad port", flags: serveFlags{Set: map[string]string{"addr": "127.0.0.1:http2"}}, want: []string{`port "http2"`}},
		{name: "bad log level", flags: serveFlags{Set: map[string]string{"log-level": "loud"}}, want: []string{`log_level "loud"`}},
		{name: "relative data dir", flags: serveFlags{Set: map[string]string{"data-dir": "data"}}, want: []string{`data_dir "data"`}},
		{name: "unknown runner", env: map[string]string{"SANDBOXD_RUNNER": "firecracker"}, want: []string{`runner.name "firecracker"`}},
		{name: "unknown runner flag", flags: serveFlags{Set: map[string]string{"runner": "firecracker"}}, want: []string{`runner.name "firecracker"`}},
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
			want: []string{"limits.ceilings.disk_bytes 1048576 is below the minimum of 16777216", "limits.defaults.disk_inodes 100 is below the minimum of 128"}},
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
		{name: "non-loopback without keys", flags: serveFlags{Set: map[string]string{"addr": "0.0.0.0:8080"}}, want: []string{`addr "0.0.0.0:8080" is not a loopback address`, "api_keys"}},
		{name: "all interfaces without keys", flags: serveFlags{Set: map[string]string{"addr": ":8080"}}, want: []string{"not a loopback"}},
		{name: "public ip without keys", flags: serveFlags{Set: map[string]string{"addr": "192.0.2.1:8080"}}, want: []string{"not a loopback"}},
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
	if got := findBinary("sandbox-agent", func(k string) string { return env[k] }); got != agent {
		t.Fatalf("findBinary = %q, want %q", got, agent)
	}
	if got := findBinary("sandbox-agent", func(string) string { return "" }); got != "" {
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
		{"127.0.0.1:8080", "", map[string]string{"127.0.0.1:8080": "API", "[::1]:8080": "API", "127.0.0.1:8081": "", "127.0.0.1:9464": "metrics"}},
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
		p := protectedAddrs(t.Context(), &config.Config{Addr: tc.addr, MetricsAddr: "127.0.0.1:9464"}, r, log)
		for a, want := range tc.want {
			if got := p.Which(netip.MustParseAddrPort(a)); got != want {
				t.Errorf("addr %q dep %q: %s is %q, want %q (set %s)", tc.addr, tc.dep, a, got, want, p)
			}
		}
	}
}

// A typo in the YAML names the closest valid key, with its full path.
func TestConfigTypoNamesClosestKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"adress: 127.0.0.1:1\n", `line 1: unknown key "adress" (did you mean "addr"?)`},
		{"queue: {size: 1, wokers: 2}\n", `unknown key "queue.wokers" (did you mean "queue.workers"?)`},
		{"sesions: {max_ttl: 1h}\n", `unknown key "sesions" (did you mean "sessions"?)`},
		{"limits:\n  defaults: {memroy_bytes: 1}\n", `line 2: unknown key "limits.defaults.memroy_bytes" (did you mean "limits.defaults.memory_bytes"?)`},
		{"runner: {docker: {imgae: x}}\n", `unknown key "runner.docker.imgae" (did you mean "runner.docker.image"?)`},
		{"tenants:\n  - name: a\n    api_keys: [k]\n    policy: {rulez: []}\n", `line 4: unknown key "tenants[0].policy.rulez" (did you mean "tenants[0].policy.rules"?)`},
		{"operator_key: [k]\n", `unknown key "operator_key" (did you mean "operator_keys"?)`},
		{"frobnicate: 1\n", `unknown key "frobnicate"; valid keys here: addr, metrics_addr, data_dir`},
		{"api: {max_wait: 5 minutes}\n", `line 1: api.max_wait: invalid duration "5 minutes"`},
		{"queue: {size: many}\n", `line 1: queue.size: "many" is not an integer`},
		{"runner: {local: {allow_weak: maybe}}\n", `runner.local.allow_weak: "maybe" is not a boolean`},
	} {
		_, err := loadConfig(serveFlags{Config: writeConfig(t, tc.yaml), Set: map[string]string{"data-dir": "/d"}}, envMap(nil), 1000)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %s", tc.yaml, err, tc.want)
		}
	}
	if strings.Contains(closestOf(t, "frobnicate: 1\n"), "did you mean") {
		t.Error("a word near no key suggests one")
	}
}

func closestOf(t *testing.T, yaml string) string {
	_, err := loadConfig(serveFlags{Config: writeConfig(t, yaml), Set: map[string]string{"data-dir": "/d"}}, envMap(nil), 1000)
	return fmt.Sprint(err)
}

// `serve --help` lists every environment variable the loader reads: the
// loader runs with a getenv that records each name asked for, in every
// branch that reads one (non-root, each runner, a config file), and each
// name must be in the help text.
func TestServeHelpListsEveryEnvVar(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, nil, "serve", "--help")
	help := r.stdout + r.stderr
	read := map[string]bool{}
	record := func(k string) string { read[k] = true; return "" }
	for _, runner := range []string{"local", "docker", "containerd"} {
		_, _ = loadConfig(serveFlags{Set: map[string]string{"runner": runner}}, record, 1000)
	}
	if len(read) < 15 {
		t.Fatalf("the loader read only %v", read)
	}
	for name := range read {
		if !strings.Contains(help, name) {
			t.Errorf("serve --help does not list %s, which the loader reads:\n%s", name, help)
		}
	}
	for _, k := range config.Flags() {
		if !strings.Contains(help, "-"+k.Flag) {
			t.Errorf("serve --help lacks the flag --%s of %s", k.Flag, k.Path)
		}
	}
}

// The defaults the configuration documents for the runners' own keys are
// the runners' defaults.
func TestRunnerDefaultsDocumented(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"runner.docker.image":         docker.DefaultImage,
		"runner.containerd.image":     containerd.DefaultImage,
		"runner.containerd.address":   containerd.DefaultAddress,
		"runner.containerd.namespace": containerd.DefaultNamespace,
	}
	for _, k := range config.Keys() {
		if w, ok := want[k.Path]; ok {
			if k.Default != w {
				t.Errorf("%s: documented default %q, the runner's is %q", k.Path, k.Default, w)
			}
			delete(want, k.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("no such keys: %v", want)
	}
}

func TestOperatorKeysAndMetricsAddr(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(serveFlags{Set: map[string]string{"data-dir": "/d", "metrics-addr": "127.0.0.1:0"}},
		envMap(map[string]string{"SANDBOXD_OPERATOR_KEYS": "op-1, op-2", "SANDBOXD_API_KEYS": "k1:alice"}), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cfg.OperatorKeys) != "[op-1 op-2]" || cfg.MetricsAddr != "127.0.0.1:0" {
		t.Fatalf("operator keys %v, metrics addr %q", cfg.OperatorKeys, cfg.MetricsAddr)
	}
	for _, tc := range []struct {
		env  map[string]string
		yaml string
		want string
	}{
		{env: map[string]string{"SANDBOXD_OPERATOR_KEYS": "key-one", "SANDBOXD_API_KEYS": "key-one:alice"}, want: `operator_keys[0] "ke*****": is also a key of tenant "alice"`},
		{env: map[string]string{"SANDBOXD_METRICS_ADDR": "127.0.0.1:8080"}, want: `metrics_addr "127.0.0.1:8080": must differ from addr`},
		{env: map[string]string{"SANDBOXD_METRICS_ADDR": "9090"}, want: `metrics_addr "9090": want HOST:PORT`},
		{yaml: "tenants: [{name: '*', api_keys: [k]}]\n", want: `tenants[0].name "*"`},
	} {
		fl := serveFlags{Set: map[string]string{"data-dir": "/d"}}
		if tc.yaml != "" {
			fl.Config = writeConfig(t, tc.yaml)
		}
		if _, err := loadConfig(fl, envMap(tc.env), 1000); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: error %v, want %s", tc.env, tc.yaml, err, tc.want)
		}
	}
}

// The compose deployment's configuration loads with the real loader.
func TestDeployConfig(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(serveFlags{Config: "../../deploy/sandboxd.yaml"}, envMap(map[string]string{
		"SANDBOXD_API_KEYS": "k:default", "SANDBOXD_DATA_DIR": "/var/lib/sandboxd-compose",
		"SANDBOXD_AGENT_PATH": "/var/lib/sandboxd-compose/bin/sandbox-agent",
	}), 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsAddr != "0.0.0.0:9464" || cfg.Runner.Name != "docker" {
		t.Fatalf("metrics_addr %q, runner %q", cfg.MetricsAddr, cfg.Runner.Name)
	}
}
