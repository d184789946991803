// Package deploy holds the files of the Docker Compose deployment of
// sandboxd with Prometheus and Grafana (the repository's docker-compose.yml;
// see README.md). Its tests check that the files agree with each other and
// with the metrics sandboxd exports, and that Debian's docker-compose (1.29)
// takes the compose file.
package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/config"
)

// compose is the part of docker-compose.yml the tests read.
type compose struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image             string   `yaml:"image"`
	Profiles          []string `yaml:"profiles"`
	PID               string   `yaml:"pid"`
	Privileged        bool     `yaml:"privileged"`
	CapAdd            []string `yaml:"cap_add"`
	Devices           []string `yaml:"devices"`
	DeviceCgroupRules []string `yaml:"device_cgroup_rules"`
	Build             *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   []string          `yaml:"depends_on"`
}

// composeFile is the compose file, at the repository's root; its relative
// paths are relative to that directory.
const composeFile = "../docker-compose.yml"

// composeVar is an interpolation: ${NAME}, ${NAME:-default} or
// ${NAME:?message}.
var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}`)

// interpolate gives every variable its default, as with an empty
// environment; a required one (:?) becomes "<required NAME>" and a plain
// one is an error: every setting the file takes from the environment has
// a default or says it is required.
func interpolate(t *testing.T, data string) string {
	t.Helper()
	return composeVar.ReplaceAllStringFunc(data, func(m string) string {
		g := composeVar.FindStringSubmatch(m)
		switch g[2] {
		case "-":
			return g[3]
		case "?":
			return "<required " + g[1] + ">"
		}
		t.Errorf("%s: %s has neither a default nor :? (required)", composeFile, m)
		return ""
	})
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	data, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal([]byte(interpolate(t, string(data))), &c); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return c
}

// fromRoot makes a path of the compose file (relative to the repository's
// root) one the tests can open from this directory.
func fromRoot(p string) string {
	if strings.HasPrefix(p, "./") {
		return filepath.Join("..", p)
	}
	return p
}

// volume is one short-syntax volume: SOURCE:TARGET[:MODE].
type volume struct{ source, target, mode string }

func parseVolume(t *testing.T, s string) volume {
	t.Helper()
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		t.Fatalf("volume %q: want SOURCE:TARGET[:MODE]", s)
	}
	v := volume{source: fromRoot(parts[0]), target: parts[1]}
	if len(parts) == 3 {
		v.mode = parts[2]
	}
	return v
}

// mountOf returns the service's volume whose target is target.
func mountOf(t *testing.T, svc composeService, target string) (volume, bool) {
	for _, s := range svc.Volumes {
		if v := parseVolume(t, s); v.target == target {
			return v, true
		}
	}
	return volume{}, false
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	for _, name := range []string{"sandboxd", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("no service %q", name)
		}
	}
	hostPorts := map[string]string{}
	for name, svc := range c.Services {
		if svc.Image == "" && svc.Build == nil {
			t.Errorf("%s: neither image nor build", name)
		}
		if svc.Build != nil {
			df := filepath.Join(fromRoot(svc.Build.Context), svc.Build.Dockerfile)
			if svc.Build.Dockerfile == "" {
				df = filepath.Join(fromRoot(svc.Build.Context), "Dockerfile")
			}
			checkDockerfile(t, name, df)
		}
		for _, s := range svc.Volumes {
			v := parseVolume(t, s)
			if !strings.HasPrefix(v.target, "/") {
				t.Errorf("%s: volume %q: target is not absolute", name, s)
			}
			switch {
			case strings.HasPrefix(v.source, "../"):
				if _, err := os.Stat(v.source); err != nil {
					t.Errorf("%s: volume %q: %v", name, s, err)
				}
			case strings.HasPrefix(v.source, "/"): // a host path
			default:
				if _, ok := c.Volumes[v.source]; !ok {
					t.Errorf("%s: named volume %q is not declared under volumes", name, v.source)
				}
			}
			if v.mode != "" && v.mode != "ro" && v.mode != "rw" && v.mode != "rshared" {
				t.Errorf("%s: volume %q: mode %q", name, s, v.mode)
			}
		}
		for _, p := range svc.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q: publish on the loopback only (127.0.0.1:HOST:CONTAINER)", name, p)
				continue
			}
			if other, dup := hostPorts[parts[1]]; dup {
				t.Errorf("host port %s published by %s and %s", parts[1], other, name)
			}
			hostPorts[parts[1]] = name
		}
		for _, d := range svc.DependsOn {
			if _, ok := c.Services[d]; !ok {
				t.Errorf("%s depends on unknown service %q", name, d)
			}
		}
	}
	// A plain `docker-compose up` starts sandboxd and Prometheus, whose
	// images deploy/build.sh builds here; Grafana's image cannot be
	// fetched here, so it is in a profile of its own.
	for name, svc := range c.Services {
		want := []string(nil)
		if name == "grafana" {
			want = []string{"grafana"}
		}
		if !slices.Equal(svc.Profiles, want) {
			t.Errorf("%s: profiles %v, want %v", name, svc.Profiles, want)
		}
		if name != "grafana" && (svc.Build == nil || !strings.HasSuffix(svc.Image, ":local")) {
			t.Errorf("%s: image %q is not built here (build: and a :local tag)", name, svc.Image)
		}
	}
	for v := range c.Volumes {
		used := false
		for _, svc := range c.Services {
			for _, s := range svc.Volumes {
				used = used || parseVolume(t, s).source == v
			}
		}
		if !used {
			t.Errorf("named volume %q is used by no service", v)
		}
	}

	// sandboxd: the Docker runner hands host paths to the host's dockerd,
	// so its data directory is mounted at the same path on both sides and
	// the agent and TMPDIR (agent sockets) live under it.
	sd := c.Services["sandboxd"]
	if _, ok := mountOf(t, sd, "/var/run/docker.sock"); !ok {
		t.Error("sandboxd does not mount the Docker socket")
	}
	if sd.PID != "host" {
		t.Errorf("sandboxd: pid %q, want host (the runner's reaper judges owners by host pid)", sd.PID)
	}
	data := sd.Environment["SANDBOXD_DATA_DIR"]
	if v, ok := mountOf(t, sd, data); !ok || v.source != data || v.mode != "rshared" {
		t.Errorf("sandboxd: data dir %q must be bind-mounted at the same host path, rshared (its workspace mounts must reach dockerd), got %+v", data, v)
	}
	// It makes workspace filesystems (loop devices, mount) without being
	// privileged, which fails on a host whose bounding set lacks a
	// capability.
	if sd.Privileged {
		t.Error("sandboxd: privileged (all capabilities: fails where the host lacks one); add what it needs instead")
	}
	if !slices.Contains(sd.CapAdd, "SYS_ADMIN") || !slices.Contains(sd.Devices, "/dev/loop-control:/dev/loop-control") ||
		!slices.Contains(sd.DeviceCgroupRules, "b 7:* rwm") {
		t.Errorf("sandboxd cannot make workspace filesystems: cap_add %v, devices %v, device_cgroup_rules %v", sd.CapAdd, sd.Devices, sd.DeviceCgroupRules)
	}
	for _, k := range []string{"SANDBOXD_AGENT_PATH", "TMPDIR"} {
		if !strings.HasPrefix(sd.Environment[k], data+"/") {
			t.Errorf("sandboxd: %s=%q is not under the shared data dir %q", k, sd.Environment[k], data)
		}
	}
	if sd.Environment["SANDBOXD_API_KEYS"] == "" {
		t.Error("sandboxd listens on all interfaces of its container: SANDBOXD_API_KEYS must be set")
	}
	cfgPath := ""
	for i, a := range sd.Command {
		if a == "--config" && i+1 < len(sd.Command) {
			cfgPath = sd.Command[i+1]
		}
	}
	cfgMount, ok := mountOf(t, sd, cfgPath)
	if !ok {
		t.Fatalf("sandboxd: --config %q is not mounted", cfgPath)
	}
	var cfg struct {
		Addr        string `yaml:"addr"`
		MetricsAddr string `yaml:"metrics_addr"`
		Runner      struct {
			Name string `yaml:"name"`
		} `yaml:"runner"`
	}
	readYAML(t, cfgMount.source, &cfg)
	if cfg.Runner.Name != "docker" {
		t.Errorf("%s: runner %q, want docker", cfgMount.source, cfg.Runner.Name)
	}
	_, sdPort, _ := strings.Cut(cfg.Addr, ":")
	if !slices.Contains(sd.Ports, "127.0.0.1:8080:"+sdPort) {
		t.Errorf("sandboxd listens on %q but publishes %v", cfg.Addr, sd.Ports)
	}

	// /metrics is on its own listener, reachable on the compose network
	// (Prometheus) and never published on the host.
	_, metricsPort, _ := strings.Cut(cfg.MetricsAddr, ":")
	if metricsPort == "" || metricsPort == sdPort {
		t.Fatalf("%s: metrics_addr %q must be its own port, apart from addr %q", cfgMount.source, cfg.MetricsAddr, cfg.Addr)
	}
	for _, p := range sd.Ports {
		if strings.HasSuffix(p, ":"+metricsPort) {
			t.Errorf("sandboxd publishes its metrics port: %q", p)
		}
	}

	// Prometheus scrapes sandboxd's service name and metrics port.
	prom := c.Services["prometheus"]
	pm, ok := mountOf(t, prom, "/etc/prometheus/prometheus.yml")
	if !ok || !slices.Contains(prom.Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Fatal("prometheus: prometheus.yml is not mounted where --config.file points")
	}
	var pcfg struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, pm.source, &pcfg)
	found := false
	for _, sc := range pcfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			found = found || (sc.JobName == "sandboxd" && slices.Contains(st.Targets, "sandboxd:"+metricsPort) && sc.MetricsPath == "/metrics")
		}
	}
	if !found {
		t.Errorf("%s scrapes no sandboxd:%s/metrics", pm.source, metricsPort)
	}
	storage := ""
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--storage.tsdb.path="); ok {
			storage = v
		}
	}
	if v, ok := mountOf(t, prom, storage); !ok || strings.HasPrefix(v.source, ".") {
		t.Errorf("prometheus: storage %q is not on a named volume", storage)
	}

	// Grafana: the datasource points at Prometheus, the dashboard provider
	// at the mounted dashboards.
	gf := c.Services["grafana"]
	prov, ok := mountOf(t, gf, "/etc/grafana/provisioning")
	if !ok {
		t.Fatal("grafana: provisioning is not mounted")
	}
	var ds struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(prov.source, "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" ||
		!slices.Contains(prom.Command, "--web.listen-address=:9090") {
		t.Errorf("grafana datasource %+v does not point at the prometheus service", ds.Datasources)
	}
	var dp struct {
		Providers []struct {
			Type    string
			Options struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(prov.source, "dashboards", "sandboxd.yml"), &dp)
	if len(dp.Providers) != 1 {
		t.Fatalf("dashboard providers: %+v", dp.Providers)
	}
	dm, ok := mountOf(t, gf, dp.Providers[0].Options.Path)
	if !ok {
		t.Fatalf("grafana: the provider's path %q is not mounted", dp.Providers[0].Options.Path)
	}
	if _, err := os.Stat(filepath.Join(dm.source, "sandboxd.json")); err != nil {
		t.Error(err)
	}
	if home := gf.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != dm.target+"/sandboxd.json" {
		t.Errorf("grafana home dashboard %q is not the provisioned one", home)
	}
}

// checkDockerfile: the file exists, builds FROM local sandboxd images only
// (no registry here), and copies only files that exist or that build.sh
// builds into bin/.
func checkDockerfile(t *testing.T, service, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v", service, err)
		return
	}
	froms := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms++
			if len(f) < 2 || !strings.HasPrefix(f[1], "sandboxd/") {
				t.Errorf("%s: %q: images can only be FROM local sandboxd/* images here", path, line)
			}
		case "COPY", "ADD":
			for _, src := range f[1 : len(f)-1] {
				if strings.HasPrefix(src, "--") {
					continue
				}
				if strings.HasPrefix(src, "bin/") {
					if !strings.Contains(readFile(t, "build.sh"), "-o "+src+" ") {
						t.Errorf("%s: COPY %s: build.sh does not build it", path, src)
					}
					continue
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), src)); err != nil {
					t.Errorf("%s: COPY %s: %v", path, src, err)
				}
			}
		}
	}
	if froms == 0 {
		t.Errorf("%s: no FROM", path)
	}
}

func TestPromtoolCheckConfig(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("SANDBOXD_REQUIRE_TOOLS") != "" {
			t.Fatal("promtool not installed (scripts/setup.sh installs it)")
		}
		t.Skip("promtool not installed (scripts/setup.sh installs it; set SANDBOXD_REQUIRE_TOOLS=1 to fail instead)")
	}
	out, err := exec.Command(promtool, "check", "config", "prometheus.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config prometheus.yml: %v\n%s", err, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	if err := yaml.Unmarshal([]byte(readFile(t, path)), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// Debian's docker-compose (1.29, the one scripts/setup.sh installs) takes
// the file: it has neither a top-level name: nor anything else newer than
// it knows, and the required API keys are refused when missing.
func TestDockerComposeConfig(t *testing.T) {
	t.Parallel()
	dc := needCompose(t)
	run := func(env ...string) (string, error) {
		return composeConfig(dc, []string{composeFile}, env...)
	}
	out, err := run("SANDBOXD_API_KEYS=key-example:example")
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var c struct { // its normal form (depends_on is a map there)
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("docker-compose config printed: %v\n%s", err, out)
	}
	for _, name := range []string{"sandboxd", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("docker-compose config: no service %q", name)
		}
	}
	if got := c.Services["sandboxd"].Environment["SANDBOXD_API_KEYS"]; got != "key-example:example" {
		t.Errorf("SANDBOXD_API_KEYS = %q", got)
	}
	if out, err := run("SANDBOXD_API_KEYS="); err == nil || !strings.Contains(out, "SANDBOXD_API_KEYS") {
		t.Errorf("docker-compose config without API keys: %v\n%s", err, out)
	}
}

// needCompose returns Debian's docker-compose, or skips the test without
// it (fails under SANDBOXD_REQUIRE_TOOLS).
func needCompose(t *testing.T) string {
	t.Helper()
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		if os.Getenv("SANDBOXD_REQUIRE_TOOLS") != "" {
			t.Fatal("docker-compose not installed (scripts/setup.sh installs it)")
		}
		t.Skip("docker-compose not installed (scripts/setup.sh installs it; set SANDBOXD_REQUIRE_TOOLS=1 to fail instead)")
	}
	return dc
}

// composeConfig runs docker-compose config on files (relative to this directory)
// in the repository's root.
func composeConfig(dc string, files []string, env ...string) (string, error) {
	args := []string{"--project-directory", ".."}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	cmd := exec.Command(dc, append(args, "config")...)
	cmd.Env = append(os.Environ(), "COMPOSE_PROJECT_NAME=sandboxd-config-test")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The variants beside docker-compose.yml are overrides of it that
// docker-compose takes with it.
func TestComposeVariants(t *testing.T) {
	t.Parallel()
	dc := needCompose(t)
	variants, err := filepath.Glob("../docker-compose.*.yml")
	if err != nil || len(variants) == 0 {
		t.Fatalf("no variants beside docker-compose.yml: %v", err)
	}
	want := map[string]string{"../docker-compose.gvisor.yml": "--runtime\n    - runsc"}
	for _, v := range variants {
		out, err := composeConfig(dc, []string{composeFile, v}, replicasEnv...)
		if err != nil {
			t.Errorf("docker-compose config with %s: %v\n%s", v, err, out)
			continue
		}
		if w, ok := want[v]; ok && !strings.Contains(out, w) {
			t.Errorf("%s: the merged file lacks %q:\n%s", v, w, out)
		}
	}
}

// replicasEnv is what docker-compose.replicas.yml requires besides the API
// keys.
var replicasEnv = []string{"SANDBOXD_API_KEYS=key-example:example", "SANDBOXD_PG_PASSWORD=pw-example",
	"SANDBOXD_REPLICA_SECRET=secret-example-0123456789abcdef0123"}

// docker-compose.replicas.yml, merged with docker-compose.yml as
// docker-compose merges it: three replicas on one Postgres, each with a
// data dir of its own, the same store and secret, an address the others
// reach on the compose network and a port of its own; Prometheus scrapes
// each; the secrets are required; sandboxd takes the replicas'
// configuration.
func TestComposeReplicas(t *testing.T) {
	t.Parallel()
	dc := needCompose(t)
	files := []string{composeFile, "../docker-compose.replicas.yml"}
	out, err := composeConfig(dc, files, replicasEnv...)
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var c struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			PID         string            `yaml:"pid"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Ports       []string          `yaml:"ports"`
			DependsOn   map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
			Healthcheck struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("docker-compose config printed: %v\n%s", err, out)
	}
	replicas := []string{"sandboxd", "sandboxd-2", "sandboxd-3"}
	if !slices.Contains(c.Services["postgres"].Healthcheck.Test, "pg_isready") {
		t.Errorf("postgres has no pg_isready healthcheck: %v", c.Services["postgres"].Healthcheck.Test)
	}
	var store, secret string
	ids, dirs, ports := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, name := range replicas {
		svc, ok := c.Services[name]
		if !ok {
			t.Fatalf("no service %q", name)
		}
		env := svc.Environment
		if store == "" {
			store, secret = env["SANDBOXD_STORE"], env["SANDBOXD_REPLICA_SECRET"]
		}
		if !strings.HasPrefix(env["SANDBOXD_STORE"], "postgres://") || env["SANDBOXD_STORE"] != store || !strings.Contains(store, "@postgres:5432/") {
			t.Errorf("%s: store %q, want the one postgres service's, the same on every replica", name, env["SANDBOXD_STORE"])
		}
		if env["SANDBOXD_REPLICA_SECRET"] != secret || len(secret) < 32 {
			t.Errorf("%s: replica secret %q, want the same 32+ bytes on every replica", name, env["SANDBOXD_REPLICA_SECRET"])
		}
		if id := env["SANDBOXD_REPLICA_ID"]; id == "" || ids[id] {
			t.Errorf("%s: replica id %q: empty or not unique", name, id)
		} else {
			ids[id] = true
		}
		if a := env["SANDBOXD_REPLICA_ADDRESS"]; a != name+":8080" {
			t.Errorf("%s: replica address %q, want %s:8080 (its service name on the compose network)", name, a, name)
		}
		data := env["SANDBOXD_DATA_DIR"]
		if data == "" || dirs[data] {
			t.Errorf("%s: data dir %q: empty or shared with another replica (one sandboxd per data dir)", name, data)
		}
		dirs[data] = true
		if !slices.Contains(svc.Volumes, data+":"+data+":rshared") {
			t.Errorf("%s: data dir %q is not bound at the same host path, rshared: %v", name, data, svc.Volumes)
		}
		for _, k := range []string{"SANDBOXD_AGENT_PATH", "TMPDIR"} {
			if !strings.HasPrefix(env[k], data+"/") {
				t.Errorf("%s: %s=%q is not under its data dir %q", name, k, env[k], data)
			}
		}
		if svc.PID != "host" || svc.Image != "sandboxd/sandboxd:local" || !slices.Contains(svc.Volumes, "/var/run/docker.sock:/var/run/docker.sock:rw") {
			t.Errorf("%s: pid %q, image %q, volumes %v: want the sandboxd service's", name, svc.PID, svc.Image, svc.Volumes)
		}
		// sandboxd exits when it cannot open its store at start.
		if d, ok := svc.DependsOn["postgres"]; !ok || d.Condition != "service_healthy" {
			t.Errorf("%s does not wait for postgres's healthcheck: %+v", name, svc.DependsOn)
		}
		if !slices.Equal(svc.Healthcheck.Test, c.Services["sandboxd"].Healthcheck.Test) || len(svc.Healthcheck.Test) == 0 {
			t.Errorf("%s: healthcheck %v, want the sandboxd service's", name, svc.Healthcheck.Test)
		}
		if len(svc.Ports) != 1 || ports[svc.Ports[0]] {
			t.Errorf("%s: ports %v, want one of its own", name, svc.Ports)
		} else {
			ports[svc.Ports[0]] = true
		}
		// sandboxd takes its configuration: the mounted file, then this
		// environment, as serve reads them.
		for k := range env {
			if strings.HasPrefix(k, "SANDBOXD_") && !slices.Contains(config.EnvVars(), k) {
				t.Errorf("%s: sandboxd reads no %s", name, k)
			}
		}
		cfg := config.Defaults()
		if err := config.Decode([]byte(readFile(t, "sandboxd.yaml")), &cfg); err != nil {
			t.Fatal(err)
		}
		if err := cfg.ApplyEnv(func(k string) string { return env[k] }); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if err := cfg.Validate(); err != nil {
			t.Errorf("%s: sandboxd refuses its configuration: %v", name, err)
		}
	}
	checkDockerfile(t, "postgres", "postgres/Dockerfile")
	if len(c.Services["postgres"].Ports) != 0 {
		t.Errorf("postgres publishes %v: only the replicas reach it", c.Services["postgres"].Ports)
	}
	var pm string
	for _, v := range c.Services["prometheus"].Volumes {
		if src, ok := strings.CutSuffix(v, ":/etc/prometheus/prometheus.yml:ro"); ok {
			pm = src
		}
	}
	var pcfg struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, pm, &pcfg)
	var targets []string
	for _, sc := range pcfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
	}
	for _, name := range replicas {
		if !slices.Contains(targets, name+":9464") {
			t.Errorf("%s scrapes %v, not %s:9464", pm, targets, name)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(promtool, "check", "config", pm).CombinedOutput(); err != nil {
			t.Errorf("promtool check config %s: %v\n%s", pm, err, out)
		}
	}
	for i, missing := range []string{"SANDBOXD_PG_PASSWORD", "SANDBOXD_REPLICA_SECRET"} {
		env := slices.Clone(replicasEnv)
		env[i+1] = missing + "="
		if out, err := composeConfig(dc, files, env...); err == nil || !strings.Contains(out, missing) {
			t.Errorf("docker-compose config without %s: %v\n%s", missing, err, out)
		}
	}
}
