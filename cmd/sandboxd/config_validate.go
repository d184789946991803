package main

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

var knownRunners = []string{"local", "docker", "containerd"}

// validate reports every problem, each quoting the bad value.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		bad("addr %q: want HOST:PORT (%v)", c.Addr, err)
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		bad("addr %q: port %q is not a number from 0 to 65535", c.Addr, port)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	if !filepath.IsAbs(c.DataDir) {
		bad("data_dir %q: must be an absolute path", c.DataDir)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdown_timeout %q: must be positive", time.Duration(c.ShutdownTimeout))
	}
	known := false
	for _, r := range knownRunners {
		known = known || c.Runner.Name == r
	}
	if !known {
		bad("runner.name %q: want one of %s", c.Runner.Name, strings.Join(knownRunners, ", "))
	}
	if r := c.Runner.Local.Rootfs; r != "" && !filepath.IsAbs(r) {
		bad("runner.local.rootfs %q: must be an absolute path", r)
	}
	if c.Runner.Name == "docker" && !filepath.IsAbs(c.Runner.Docker.AgentPath) {
		bad("runner.docker.agent_path %q: the docker runner needs the absolute path of the static sandbox-agent binary (none next to sandboxd or on PATH; build it with CGO_ENABLED=0 go build -o /usr/local/bin/sandbox-agent ./cmd/sandbox-agent)", c.Runner.Docker.AgentPath)
	}
	if c.Runner.Name == "containerd" {
		cd := c.Runner.Containerd
		if !filepath.IsAbs(cd.AgentPath) {
			bad("runner.containerd.agent_path %q: the containerd runner needs the absolute path of the static sandbox-agent binary (none next to sandboxd or on PATH; build it with CGO_ENABLED=0 go build -o /usr/local/bin/sandbox-agent ./cmd/sandbox-agent)", cd.AgentPath)
		}
		if a := strings.TrimPrefix(cd.Address, "unix://"); a != "" && !filepath.IsAbs(a) {
			bad("runner.containerd.address %q: want the absolute path of containerd's socket", cd.Address)
		}
		if ns := cd.Namespace; ns != "" && !validContainerdNamespace(ns) {
			bad("runner.containerd.namespace %q: want letters, digits, '.', '_' or '-', at most 63 characters", ns)
		}
	}
	c.validateTools(bad)
	c.Limits.Defaults.validate("limits.defaults", bad)
	c.Limits.Ceilings.validate("limits.ceilings", bad)
	_, ceilings := c.EffectiveLimits()
	c.Limits.Defaults.checkCeilings(ceilings, bad)
	if c.Queue.Size <= 0 {
		bad("queue.size %d: must be positive", c.Queue.Size)
	}
	if c.Queue.Workers <= 0 {
		bad("queue.workers %d: must be positive", c.Queue.Workers)
	}
	if c.API.MaxBodyBytes <= 0 {
		bad("api.max_body_bytes %d: must be positive", c.API.MaxBodyBytes)
	}
	if c.API.MaxWait <= 0 {
		bad("api.max_wait %q: must be positive", time.Duration(c.API.MaxWait))
	}
	ss := c.Sessions
	if ss.MaxPerTenant <= 0 {
		bad("sessions.max_per_tenant %d: must be positive", ss.MaxPerTenant)
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"default_ttl", ss.DefaultTTL}, {"max_ttl", ss.MaxTTL}, {"default_idle", ss.DefaultIdle}, {"reap_interval", ss.ReapInterval}} {
		if d.v <= 0 {
			bad("sessions.%s %q: must be positive", d.name, time.Duration(d.v))
		}
	}
	if ss.DefaultTTL > ss.MaxTTL {
		bad("sessions.default_ttl %q: exceeds sessions.max_ttl %q", time.Duration(ss.DefaultTTL), time.Duration(ss.MaxTTL))
	}
	if ss.MaxFileBytes <= 0 {
		bad("sessions.max_file_bytes %d: must be positive", ss.MaxFileBytes)
	}
	if ss.MaxArchiveBytes <= 0 {
		bad("sessions.max_archive_bytes %d: must be positive", ss.MaxArchiveBytes)
	}
	if ss.MaxArchiveEntries <= 0 {
		bad("sessions.max_archive_entries %d: must be positive", ss.MaxArchiveEntries)
	}
	if c.Pool.Size != nil && *c.Pool.Size < 0 {
		bad("pool.size %d: must not be negative (0 disables the pool)", *c.Pool.Size)
	}
	if c.Pool.MaxSandboxes <= 0 {
		bad("pool.max_sandboxes %d: must be positive", c.Pool.MaxSandboxes)
	}
	if c.Retention.MaxAge < 0 {
		bad("retention.max_age %q: must not be negative (0: no age bound)", time.Duration(c.Retention.MaxAge))
	}
	if c.Retention.MaxBytes < 0 {
		bad("retention.max_bytes %d: must not be negative (0: no size bound)", c.Retention.MaxBytes)
	}
	if c.Retention.Interval <= 0 {
		bad("retention.interval %q: must be positive", time.Duration(c.Retention.Interval))
	}
	if c.HTTPRequest.MaxResponseBytes < 0 {
		bad("http_request.max_response_bytes %d: must not be negative", c.HTTPRequest.MaxResponseBytes)
	}
	if c.HTTPRequest.Timeout < 0 {
		bad("http_request.timeout %q: must not be negative", time.Duration(c.HTTPRequest.Timeout))
	}

	names := map[string]bool{}
	keys := map[string]string{}
	for i, t := range c.Tenants {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n") || len(t.Name) > 128:
			bad("tenants[%d].name %q: want a non-empty name without spaces (at most 128 bytes)", i, t.Name)
		case names[t.Name]:
			bad("tenants[%d].name %q: duplicate tenant", i, t.Name)
		}
		names[t.Name] = true
		if len(t.APIKeys) == 0 {
			bad("tenants[%d] (%q): no api_keys", i, t.Name)
		}
		if t.Policy != nil {
			if perr := t.Policy.Validate(); perr != nil {
				bad("tenants[%d] (%q): %v", i, t.Name, perr)
			}
		}
		for j, img := range t.Images {
			// The runner checks the syntax at start (job.New).
			if img == "" || len(img) > 1024 || strings.ContainsFunc(img, func(r rune) bool { return r < ' ' || r == 0x7f }) {
				bad("tenants[%d] (%q): images[%d] %q: want a non-empty image reference (or local rootfs path) without control characters", i, t.Name, j, img)
			}
		}
		for _, k := range t.APIKeys {
			switch {
			case k == "" || strings.ContainsAny(k, " \t\r\n,"):
				bad("tenants[%d] (%q): API key %q must be non-empty without spaces or commas", i, t.Name, redact(k))
			case keys[k] != "":
				bad("tenants[%d] (%q): API key %q is also a key of tenant %q", i, t.Name, redact(k), keys[k])
			default:
				keys[k] = t.Name
			}
		}
	}
	if len(keys) == 0 && err == nil && !isLoopback(host) {
		bad("addr %q is not a loopback address and no API keys are configured: anyone who can reach it could run code here; "+
			"configure tenants with api_keys (or SANDBOXD_API_KEYS=KEY:TENANT), or listen on 127.0.0.1", c.Addr)
	}
	return errors.Join(errs...)
}

func (l LimitValues) validate(prefix string, bad func(string, ...any)) {
	for _, f := range l.fields() {
		if f.v < 0 {
			bad("%s.%s %s: must not be negative", prefix, f.name, f)
		}
	}
}

// checkCeilings refuses a default above its ceiling (both set).
func (l LimitValues) checkCeilings(ceil LimitValues, bad func(string, ...any)) {
	cf := ceil.fields()
	for i, f := range l.fields() {
		if f.v > 0 && cf[i].v > 0 && f.v > cf[i].v {
			bad("limits.defaults.%s %s is above limits.ceilings.%s %s", f.name, f, f.name, cf[i])
		}
	}
}

// Built-in limits, used for every field the configuration leaves zero.
// Ceilings are what a request may ask for at most; defaults apply to what a
// request leaves unset (lowered to a configured ceiling below them).
var (
	builtinDefaults = LimitValues{
		MemoryBytes: 512 << 20, PIDs: 256, CPUMillis: 1000, Timeout: Duration(60 * time.Second),
		OutputBytes: 1 << 20, NoFile: 1024, FileSizeBytes: 100 << 20,
	}
	builtinCeilings = LimitValues{
		MemoryBytes: 4 << 30, PIDs: 1024, CPUMillis: 4000, Timeout: Duration(30 * time.Minute),
		OutputBytes: 16 << 20, NoFile: 65536, FileSizeBytes: 1 << 30,
	}
)

// EffectiveLimits fills the configured limits with the built-in ones: a
// zero ceiling takes the built-in ceiling; a zero default takes the
// built-in default, or the ceiling when that is lower.
func (c *Config) EffectiveLimits() (defaults, ceilings LimitValues) {
	d, cl := c.Limits.Defaults.array(), c.Limits.Ceilings.array()
	bd, bc := builtinDefaults.array(), builtinCeilings.array()
	for i := range d {
		if cl[i] == 0 {
			cl[i] = bc[i]
		}
		if d[i] == 0 {
			d[i] = min(bd[i], cl[i])
		}
	}
	return fromArray(d), fromArray(cl)
}

func (l LimitValues) array() [7]int64 {
	var a [7]int64
	for i, f := range l.fields() {
		a[i] = f.v
	}
	return a
}

func fromArray(a [7]int64) LimitValues {
	return LimitValues{
		MemoryBytes: a[0], PIDs: a[1], CPUMillis: a[2], Timeout: Duration(a[3]),
		OutputBytes: a[4], NoFile: a[5], FileSizeBytes: a[6],
	}
}

type limitField struct {
	name string
	v    int64
}

func (f limitField) String() string {
	if f.name == "timeout" {
		return strconv.Quote(time.Duration(f.v).String())
	}
	return strconv.FormatInt(f.v, 10)
}

func (l LimitValues) fields() []limitField {
	return []limitField{
		{"memory_bytes", l.MemoryBytes}, {"pids", l.PIDs}, {"cpu_millis", l.CPUMillis},
		{"timeout", int64(l.Timeout)}, {"output_bytes", l.OutputBytes},
		{"nofile", l.NoFile}, {"file_size_bytes", l.FileSizeBytes},
	}
}

// isLoopback: "localhost" or a loopback IP. "" (all interfaces) is not.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validContainerdNamespace mirrors containerd's namespace name rule.
func validContainerdNamespace(ns string) bool {
	if len(ns) == 0 || len(ns) > 63 {
		return false
	}
	for i, r := range ns {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(ns)-1 || !strings.ContainsRune("._-", r)) {
			return false
		}
	}
	return true
}
