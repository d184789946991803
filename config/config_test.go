package config

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/runner"
)

// The README carries Markdown() verbatim.
func TestReadmeTable(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), Markdown()) {
		t.Errorf("README.md does not contain config.Markdown() verbatim; paste this under ## Configuration:\n%s", Markdown())
	}
}

// The README's example configuration decodes strictly and validates.
func TestReadmeExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(b), "\n## Configuration\n")
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("no yaml block under ## Configuration")
	}
	c := Defaults()
	if err := Decode([]byte(m[1]), &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(func(string) string { return "/home/u" }, 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Every key is documented, and the defaults are valid.
func TestKeysAndDefaults(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range Keys() {
		if k.Doc == "" || seen[k.Path] {
			t.Errorf("key %s: doc %q, seen before %v", k.Path, k.Doc, seen[k.Path])
		}
		seen[k.Path] = true
	}
	for _, must := range []string{"addr", "metrics_addr", "operator_keys", "sessions.max_ttl", "limits.defaults.timeout", "limits.ceilings.timeout", "tenants[].policy"} {
		if !seen[must] {
			t.Errorf("no key %s", must)
		}
	}
	c := Defaults()
	if err := c.Complete(func(string) string { return "/home/u" }, 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}

func TestLimitsEffective(t *testing.T) {
	t.Parallel()
	e := Limits{}.Effective()
	if e.Defaults != BuiltinDefaults || e.Ceilings != BuiltinCeilings {
		t.Fatalf("built-in: %+v", e)
	}
	e = Limits{Ceilings: runner.Limits{MemoryBytes: 128 << 20, Timeout: time.Hour}, Defaults: runner.Limits{PIDs: 32}}.Effective()
	if e.Defaults.MemoryBytes != 128<<20 || e.Ceilings.MemoryBytes != 128<<20 || e.Defaults.PIDs != 32 ||
		e.Ceilings.PIDs != BuiltinCeilings.PIDs || e.Defaults.Timeout != time.Minute || e.Ceilings.Timeout != time.Hour {
		t.Fatalf("lowered: %+v", e)
	}
}

// The rule of every request: any value up to the ceiling, the default for
// what it leaves out, above the ceiling an error naming it.
func TestLimitsResolve(t *testing.T) {
	t.Parallel()
	l := Limits{Defaults: runner.Limits{Timeout: 3 * time.Second}, Ceilings: runner.Limits{Timeout: 10 * time.Second}}.Effective()
	got, err := l.Resolve(runner.Limits{})
	if err != nil || got.Timeout != 3*time.Second || got.MemoryBytes != BuiltinDefaults.MemoryBytes {
		t.Fatalf("none asked: %+v %v", got, err)
	}
	got, err = l.Resolve(runner.Limits{Timeout: 8 * time.Second, PIDs: 1024})
	if err != nil || got.Timeout != 8*time.Second || got.PIDs != 1024 {
		t.Fatalf("above the default, up to the ceiling: %+v %v", got, err)
	}
	for req, want := range map[runner.Limits]string{
		{Timeout: 11 * time.Second}: "limits.timeout 11s exceeds the ceiling 10s (limits.ceilings.timeout)",
		{PIDs: 1025}:                "limits.pids 1025 exceeds the ceiling 1024",
		{MemoryBytes: -1}:           "limits.memory_bytes -1 is negative",
	} {
		if _, err := l.Resolve(req); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %s", req, err, want)
		}
	}
}

// The disk limits: a filesystem of at least 16 MiB and 128 inodes, in the
// configuration as in a request; a lower ceiling lowers the default.
func TestDiskLimits(t *testing.T) {
	t.Parallel()
	e := Limits{}.Effective()
	if e.Defaults.DiskBytes != 1<<30 || e.Defaults.DiskInodes != 65536 || e.Ceilings.DiskBytes != 8<<30 || e.Ceilings.DiskInodes != 1<<20 {
		t.Fatalf("built-in disk limits: %+v", e)
	}
	if d := (Limits{Ceilings: runner.Limits{DiskBytes: 256 << 20}}).Effective().Defaults.DiskBytes; d != 256<<20 {
		t.Errorf("default under a 256 MiB ceiling: %d", d)
	}
	err := Limits{Defaults: runner.Limits{DiskInodes: 100}, Ceilings: runner.Limits{DiskBytes: 1 << 20}}.Validate()
	for _, want := range []string{"limits.defaults.disk_inodes 100 is below the minimum of 128", "limits.ceilings.disk_bytes 1048576 is below the minimum of 16777216"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %s", err, want)
		}
	}
	for req, want := range map[runner.Limits]string{
		{DiskBytes: 1 << 20}:  "limits.disk_bytes 1048576 is below the minimum",
		{DiskInodes: 10}:      "limits.disk_inodes 10 is below the minimum of 128",
		{DiskBytes: 16 << 30}: "limits.disk_bytes 17179869184 exceeds the ceiling 8589934592",
	} {
		if _, err := e.Resolve(req); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %s", req, err, want)
		}
	}
	if got, err := e.Resolve(runner.Limits{DiskBytes: 64 << 20}); err != nil || got.DiskBytes != 64<<20 || got.DiskInodes != 65536 {
		t.Errorf("64 MiB asked: %+v %v", got, err)
	}
}

func TestFill(t *testing.T) {
	t.Parallel()
	s := Sessions{MaxPerTenant: 3, MaxTTL: time.Minute}
	Fill(&s, Defaults().Sessions)
	d := Defaults().Sessions
	if s.MaxPerTenant != 3 || s.MaxTTL != time.Minute || s.DefaultTTL != d.DefaultTTL || s.MaxArchiveEntries != d.MaxArchiveEntries {
		t.Fatalf("%+v", s)
	}
}

func TestClosest(t *testing.T) {
	t.Parallel()
	keys := []string{"addr", "metrics_addr", "data_dir", "sessions", "queue", "workers", "max_ttl"}
	for in, want := range map[string]string{
		"adress": "addr", "sesions": "sessions", "wokers": "workers", "max_tll": "max_ttl", "Queue": "queue",
		"metrics": "metrics_addr", "frobnicate": "", "x": "",
	} {
		if got := closest(in, keys); got != want {
			t.Errorf("closest(%q) = %q, want %q", in, got, want)
		}
	}
}

// Decode never panics, and what it accepts validates or is refused with an
// error (the config file is the operator's, but a typo must not crash).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"addr: 127.0.0.1:1\n", "queue: {size: 1, wokers: 2}\n", "tenants: &x [*x]\n",
		"limits: {defaults: {timeout: 0}}\n", "tenants: [{name: a, api_keys: [k], policy: {rules: [{tool: x, action: deny}]}}]\n",
		"pool: {size: -1}\nretention: {max_age: 1h}\n", "sessions: [1]\n", "- 1\n", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := Defaults()
		if err := Decode([]byte(s), &c); err != nil {
			return
		}
		_ = c.Complete(func(string) string { return "/home/u" }, 1000)
		_ = c.Validate()
		_ = c.Limits.Effective()
	})
}

// A percentage key (check:"percent") takes 0 (its default) to 100.
func TestPercentKey(t *testing.T) {
	for v, ok := range map[string]bool{"0": true, "25": true, "100": true, "101": false, "-1": false} {
		c := Defaults()
		c.DataDir = "/var/lib/sandboxd"
		if err := Decode([]byte("runner:\n  kubernetes:\n    cpu_request_percent: "+v+"\n"), &c); err != nil {
			t.Fatal(err)
		}
		err := c.Validate()
		if ok && err != nil {
			t.Errorf("%s refused: %v", v, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "runner.kubernetes.cpu_request_percent "+v+": want a percentage from 1 to 100")) {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// runner.kubernetes.pod_name, pod_namespace and pod_uid come from their
// environment variables (the Deployment's downward API) and are set all
// three or none.
func TestKubernetesPodKeys(t *testing.T) {
	env := map[string]string{"SANDBOXD_POD_NAME": "sandboxd-7d9c-x2", "SANDBOXD_POD_NAMESPACE": "sandboxd", "SANDBOXD_POD_UID": "4fb30abd-bc88-4225-84ec-eec1e19308f7"}
	c := Defaults()
	c.DataDir = "/var/lib/sandboxd"
	if err := c.ApplyEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if k := c.Runner.Kubernetes; k.PodName != env["SANDBOXD_POD_NAME"] || k.PodNamespace != "sandboxd" || k.PodUID != env["SANDBOXD_POD_UID"] {
		t.Fatalf("from the environment: %+v", k)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Runner.Kubernetes.PodUID = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `runner.kubernetes.pod_name "sandboxd-7d9c-x2", pod_namespace "sandboxd", pod_uid "": set all three`) {
		t.Fatalf("pod_uid missing: %v", err)
	}
	c.Runner.Kubernetes = KubernetesRunner{}
	if err := c.Validate(); err != nil {
		t.Fatalf("none set: %v", err)
	}
}
