package policy

import (
	"strings"
	"testing"
)

func TestEgressValidate(t *testing.T) {
	t.Parallel()
	good := EgressPolicy{
		Allow: []EgressRule{
			{Host: "api.example.com"}, {Host: "*.Example.org."}, {Host: "*.bücher.example", Ports: []int{8443}},
			{Host: "10.1.2.3", Methods: []string{"GET", "CONNECT"}}, {Host: "[2001:db8::1]"},
		},
		AllowPrivateCIDRs: []string{"10.0.0.0/8", "fd00::/8"},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid policy: %v", err)
	}
	bad := EgressPolicy{
		Allow: []EgressRule{
			{Host: "ok.example"},
			{Host: ""},
			{Host: "127.1"},
			{Host: "*"},
			{Host: "*.1.2.3.4"},
			{Host: "a.*.example"},
			{Host: "exa mple.com"},
			{Host: "ok.example", Ports: []int{0, 443, 70000}},
			{Host: "ok.example", Methods: []string{"GET", "BAD METHOD"}},
			{Host: "xn--zz.example"},
		},
		AllowPrivateCIDRs: []string{"10.0.0.0/8", "10.0.0.1/8", "banana"},
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("invalid policy accepted")
	}
	for _, want := range []string{
		"allow[1].host: required", "allow[2].host:", "allow[3].host:", "allow[4].host:", "allow[5].host:",
		"allow[6].host:", "allow[7].ports[0]:", "allow[7].ports[2]:", "allow[8].methods[1]:", "allow[9].host:",
		"allow_private_cidrs[1]:", "allow_private_cidrs[2]:",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "allow[0]") || strings.Contains(err.Error(), "allow_private_cidrs[0]") || strings.Contains(err.Error(), "allow[7].ports[1]") {
		t.Errorf("valid entries reported:\n%v", err)
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if !strings.HasPrefix(line, "allow") {
			t.Errorf("line does not start with its key: %q", line)
		}
	}
}

func TestEgressMatch(t *testing.T) {
	t.Parallel()
	p := &EgressPolicy{Allow: []EgressRule{
		{Host: "api.example.com"},
		{Host: "*.example.org", Ports: []int{8080}},
		{Host: "get.example", Methods: []string{"get", "HEAD"}},
		{Host: "tls.example", Methods: []string{"GET", "CONNECT"}},
		{Host: "*.bücher.example"},
		{Host: "::1", Ports: []int{9}},
	}}
	for _, tc := range []struct {
		method, host string
		port         int
		rule         int
	}{
		{"GET", "api.example.com", 443, 0},
		{"CONNECT", "API.Example.COM.", 80, 0},
		{"GET", "api.example.com", 8080, -1},
		{"GET", "x.api.example.com", 443, -1},
		{"GET", "a.example.org", 8080, 1},
		{"GET", "a.b.example.org", 8080, 1},
		{"GET", "example.org", 8080, -1},
		{"GET", "a.example.org", 443, -1},
		{"GET", "evilexample.org", 8080, -1},
		{"GET", "get.example", 80, 2},
		{"POST", "get.example", 80, -1},
		{"CONNECT", "get.example", 443, -1},
		{"CONNECT", "tls.example", 443, 3},
		{"GET", "shop.xn--bcher-kva.example", 443, 4},
		{"GET", "shop.bücher.example", 443, -1}, // clients send punycode
		{"GET", "[::1]", 9, 5},
		{"GET", "0:0::1", 9, 5},
		{"GET", "api.example.com", 0, -1},
		{"GET", "api.example.com", 65536, -1},
		{"GET", "127.1", 443, -1},
	} {
		rule, ok := p.Match(tc.method, tc.host, tc.port)
		if ok != (tc.rule >= 0) || rule != tc.rule {
			t.Errorf("Match(%s, %q, %d) = %d, %v; want %d", tc.method, tc.host, tc.port, rule, ok, tc.rule)
		}
	}
	var nilPolicy *EgressPolicy
	if _, ok := nilPolicy.Match("GET", "api.example.com", 443); ok {
		t.Error("nil policy matched")
	}
}

func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"Example.COM.", "[::1]", "127.1", "xn--bcher-kva.example", "a..b", "1.2.3.4", "::ffff:1.2.3.4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := CanonicalHost(s)
		if err != nil {
			return
		}
		again, err := CanonicalHost(c)
		if err != nil || again != c {
			t.Fatalf("%q -> %q -> %q, %v: not a fixed point", s, c, again, err)
		}
		p := EgressPolicy{Allow: []EgressRule{{Host: c}}}
		if err := p.Validate(); err != nil {
			t.Fatalf("canonical host %q rejected as a rule: %v", c, err)
		}
		if _, ok := p.Match("GET", s, 443); !ok {
			t.Fatalf("%q does not match its own canonical rule %q", s, c)
		}
	})
}
