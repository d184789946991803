package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Validate reports every problem, each naming the key and quoting the bad
// value: first the checks the keys' tags declare, then the rules across
// keys.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, k := range Keys() {
		if k.index != nil && len(k.checks) > 0 && !strings.HasPrefix(k.Path, "limits.") { // limits: Limits.check
			checkKey(k, k.field(c), bad)
		}
	}
	c.validate(bad)
	return errors.Join(errs...)
}

// checkKey applies a key's check tag to its value.
func checkKey(k Key, v reflect.Value, bad func(string, ...any)) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	shown := quote(v)
	for _, c := range k.checks {
		rule, arg, _ := strings.Cut(c, "=")
		switch rule {
		case "positive":
			if v.Int() <= 0 {
				bad("%s %s: must be positive", k.Path, shown)
			}
		case "nonnegative":
			if v.Int() < 0 {
				bad("%s %s: must not be negative", k.Path, shown)
			}
		case "percent": // 0: the key's default
			if v.Int() < 0 || v.Int() > 100 {
				bad("%s %s: want a percentage from 1 to 100 (0: the default)", k.Path, shown)
			}
		case "required":
			if v.String() == "" {
				bad("%s: must be set", k.Path)
			}
		case "abspath":
			if s := v.String(); s != "" && !filepath.IsAbs(s) {
				bad("%s %s: must be an absolute path", k.Path, shown)
			}
		case "hostport":
			s := v.String()
			if _, port, err := net.SplitHostPort(s); err != nil {
				bad("%s %s: want HOST:PORT (%v)", k.Path, shown, err)
			} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
				bad("%s %s: port %q is not a number from 0 to 65535", k.Path, shown, port)
			}
		case "store":
			if s := v.String(); s != "" && s != "sqlite" {
				if !strings.HasPrefix(s, "postgres://") && !strings.HasPrefix(s, "postgresql://") {
					bad("%s: want sqlite or a postgres:// URL", k.Path)
				} else if _, err := url.Parse(s); err != nil {
					bad("%s: not a valid postgres:// URL", k.Path) // the URL may hold a password: not shown
				}
			}
		case "secret":
			if s := v.String(); s != "" && len(s) < 32 {
				bad("%s: must be at least 32 bytes (it is %d; the value is not shown)", k.Path, len(s))
			}
		case "oneof":
			ok := false
			for _, w := range strings.Fields(arg) {
				ok = ok || v.String() == w
			}
			if !ok {
				bad("%s %s: want one of %s", k.Path, shown, strings.Join(strings.Fields(arg), ", "))
			}
		default:
			panic("config: unknown check " + c + " on " + k.Path)
		}
	}
}

// quote shows a value in an error: strings and durations quoted.
func quote(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return strconv.Quote(time.Duration(v.Int()).String())
	case v.Kind() == reflect.String:
		return strconv.Quote(v.String())
	}
	return fmt.Sprint(v.Interface())
}

// validate holds the rules across keys.
func (c *Config) validate(bad func(string, ...any)) {
	if a := c.ReplicaAddress; a != "" {
		// Forwarded requests go to http://ADDRESS: a URL here would be a
		// host named "http" (every forward failing at run time).
		if host, _, err := net.SplitHostPort(a); err != nil || host == "" || strings.ContainsAny(a, "/@?#") {
			bad("replica_address %q: want the HOST:PORT other replicas reach this one at (no scheme or path)", a)
		}
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
	if k := c.Runner.Kubernetes; (k.PodName == "") != (k.PodNamespace == "") || (k.PodName == "") != (k.PodUID == "") {
		bad("runner.kubernetes.pod_name %q, pod_namespace %q, pod_uid %q: set all three (the downward API's metadata.name, metadata.namespace, metadata.uid) or none", k.PodName, k.PodNamespace, k.PodUID)
	}
	c.Limits.check(bad)
	c.validateTurns(bad)
	if ss := c.Sessions; ss.DefaultTTL > ss.MaxTTL {
		bad("sessions.default_ttl %q: exceeds sessions.max_ttl %q", ss.DefaultTTL, ss.MaxTTL)
	}

	for i, c := range c.Callbacks.AllowPrivateCIDRs {
		if pfx, err := netip.ParsePrefix(c); err != nil || pfx.Addr().Zone() != "" || pfx != pfx.Masked() {
			bad("callbacks.allow_private_cidrs[%d] %q: want a CIDR like \"10.0.0.0/8\" without host bits or zone", i, c)
		}
	}

	names := map[string]bool{}
	keys := map[string]string{}
	for i, t := range c.Tenants {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n*") || len(t.Name) > 128:
			bad("tenants[%d].name %q: want a non-empty name without spaces or '*' (at most 128 bytes)", i, t.Name)
		case names[t.Name]:
			bad("tenants[%d].name %q: duplicate tenant", i, t.Name)
		}
		names[t.Name] = true
		if len(t.APIKeys) == 0 {
			bad("tenants[%d] (%q): no api_keys", i, t.Name)
		}
		if t.Weight < 0 || t.Weight > MaxTenantWeight {
			bad("tenants[%d] (%q): weight %d: want 1 to %d (0: %d)", i, t.Name, t.Weight, MaxTenantWeight, DefaultTenantWeight)
		}
		if t.MaxRunning < 0 {
			bad("tenants[%d] (%q): max_running %d: must not be negative", i, t.Name, t.MaxRunning)
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
			case !validKey(k):
				bad("tenants[%d] (%q): API key %q must be non-empty without spaces or commas", i, t.Name, redact(k))
			case keys[k] != "":
				bad("tenants[%d] (%q): API key %q is also a key of tenant %q", i, t.Name, redact(k), keys[k])
			default:
				keys[k] = t.Name
			}
		}
	}
	for i, k := range c.OperatorKeys {
		switch {
		case !validKey(k):
			bad("operator_keys[%d] %q: must be non-empty without spaces or commas", i, redact(k))
		case keys[k] != "":
			bad("operator_keys[%d] %q: is also a key of tenant %q (an operator key must be its own)", i, redact(k), keys[k])
		default:
			keys[k] = "operator"
		}
	}
	if host, _, err := net.SplitHostPort(c.Addr); len(keys) == 0 && err == nil && !isLoopback(host) {
		bad("addr %q is not a loopback address and no API keys are configured: anyone who can reach it could run code here; "+
			"configure tenants with api_keys (or SANDBOXD_API_KEYS=KEY:TENANT), or listen on 127.0.0.1", c.Addr)
	}
	if c.MetricsAddr == c.Addr {
		bad("metrics_addr %q: must differ from addr (the API no longer serves /metrics)", c.MetricsAddr)
	}
}

func validKey(k string) bool { return k != "" && !strings.ContainsAny(k, " \t\r\n,") }

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
