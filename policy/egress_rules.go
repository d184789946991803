package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// EgressPolicy is a tenant's allowlist for sandboxes (and the in-process
// http_request tool) with the http effect. The zero value allows nothing.
type EgressPolicy struct {
	// Allow lists what may be reached; a request passes when one rule
	// matches its host, port and method.
	Allow []EgressRule `yaml:"allow" json:"allow,omitempty"`
	// AllowPrivateCIDRs lists private, loopback or link-local networks
	// that may be reached despite the default refusal (on-premises
	// services, tests). Empty: none. A cloud metadata address
	// (169.254.169.254, fd00:ec2::254, ...) is reachable only when listed
	// as a single address (/32, /128), never through a wider network.
	// Nothing here opens the unspecified addresses (0.0.0.0/8, ::) or IPv6
	// forms carrying them or loopback, nor sandboxd's own addresses
	// (internal/netclass.Guard).
	AllowPrivateCIDRs []string `yaml:"allow_private_cidrs" json:"allow_private_cidrs,omitempty"`
}

// EgressRule allows one host (exact, or "*.example.com" for any subdomain)
// on some ports (empty: 80 and 443) with some methods (empty: any).
//
// Hosts compare case-insensitively, without a trailing dot, and in their
// ASCII (punycode) form: a rule may be written in Unicode ("*.bücher.example")
// and matches the "xn--" spelling clients send. "*.example.com" matches
// every name below example.com ("a.example.com", "a.b.example.com") but not
// example.com itself. An IP address (v4 dotted decimal, v6 with or without
// brackets) matches only that address written as an IP literal; the egress
// proxy still refuses private addresses outside AllowPrivateCIDRs.
//
// Methods: an HTTPS request goes through a CONNECT tunnel whose inner
// method the proxy cannot see, so a rule that lists methods allows HTTPS
// (CONNECT) only when it lists "CONNECT" too; a rule without methods allows
// every method, CONNECT included.
type EgressRule struct {
	Host    string   `yaml:"host" json:"host"`
	Ports   []int    `yaml:"ports" json:"ports,omitempty"`
	Methods []string `yaml:"methods" json:"methods,omitempty"`
}

// DefaultEgressPorts are the ports of a rule that lists none.
var DefaultEgressPorts = []int{80, 443}

// Validate checks the policy. Each problem is one line naming its key
// relative to the policy ("allow[2].host: ..."); lines are joined with
// errors.Join.
func (p *EgressPolicy) Validate() error {
	if p == nil {
		return nil
	}
	var errs []error
	for i, r := range p.Allow {
		at := fmt.Sprintf("allow[%d]", i)
		if _, err := ruleHost(r.Host); err != nil {
			errs = append(errs, fmt.Errorf("%s.host: %w", at, err))
		}
		for j, port := range r.Ports {
			if port < 1 || port > 65535 {
				errs = append(errs, fmt.Errorf("%s.ports[%d]: %d is not a port from 1 to 65535", at, j, port))
			}
		}
		for j, m := range r.Methods {
			if !isToken(m) {
				errs = append(errs, fmt.Errorf("%s.methods[%d]: %q is not an HTTP method", at, j, m))
			}
		}
	}
	for i, c := range p.AllowPrivateCIDRs {
		pfx, err := netip.ParsePrefix(c)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("allow_private_cidrs[%d]: %q is not a CIDR like \"10.0.0.0/8\"", i, c))
		case pfx.Addr().Zone() != "":
			errs = append(errs, fmt.Errorf("allow_private_cidrs[%d]: %q has a zone", i, c))
		case pfx != pfx.Masked():
			errs = append(errs, fmt.Errorf("allow_private_cidrs[%d]: %q has host bits set (did you mean %s?)", i, c, pfx.Masked()))
		}
	}
	return errors.Join(errs...)
}

// PrivatePrefixes returns AllowPrivateCIDRs parsed, skipping entries
// Validate reports as invalid. The egress proxy and http_request build
// their netclass.Guard from them.
func (p *EgressPolicy) PrivatePrefixes() []netip.Prefix {
	if p == nil {
		return nil
	}
	var out []netip.Prefix
	for _, c := range p.AllowPrivateCIDRs {
		if pfx, err := netip.ParsePrefix(c); err == nil && pfx.Addr().Zone() == "" && pfx == pfx.Masked() {
			out = append(out, pfx)
		}
	}
	return out
}

// Match reports the index of the first rule allowing method on host:port.
// host is canonicalised first (CanonicalHost); a host that is not a valid
// name or IP literal matches nothing, nor does a rule whose host is invalid
// (Validate reports those).
func (p *EgressPolicy) Match(method, host string, port int) (rule int, ok bool) {
	if p == nil || port < 1 || port > 65535 {
		return -1, false
	}
	h, err := CanonicalHost(host)
	if err != nil {
		return -1, false
	}
	for i, r := range p.Allow {
		rh, err := ruleHost(r.Host)
		if err != nil || !hostMatches(rh, h) {
			continue
		}
		if !portMatches(r.Ports, port) || !methodMatches(r.Methods, method) {
			continue
		}
		return i, true
	}
	return -1, false
}

func hostMatches(rule, host string) bool {
	if suffix, ok := strings.CutPrefix(rule, "*"); ok { // suffix is ".example.com"
		return len(host) > len(suffix) && strings.HasSuffix(host, suffix)
	}
	return rule == host
}

func portMatches(ports []int, port int) bool {
	if len(ports) == 0 {
		ports = DefaultEgressPorts
	}
	for _, p := range ports {
		if p == port {
			return true
		}
	}
	return false
}

func methodMatches(methods []string, method string) bool {
	if len(methods) == 0 {
		return true
	}
	for _, m := range methods {
		if strings.ToUpper(m) == method {
			return true
		}
	}
	return false
}

// ruleHost canonicalises a rule's host: "*." + name, a name or an IP
// literal. Unicode names are converted to their ASCII form.
func ruleHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("required")
	}
	wild := strings.HasPrefix(h, "*.")
	name := strings.TrimPrefix(h, "*.")
	if !isASCII(name) {
		a, err := idna.Lookup.ToASCII(name)
		if err != nil {
			return "", fmt.Errorf("%q is not a valid internationalised host name: %v", h, err)
		}
		name = a
	}
	c, err := CanonicalHost(name)
	if err != nil {
		return "", err
	}
	if wild {
		if _, err := netip.ParseAddr(c); err == nil {
			return "", fmt.Errorf("%q: a wildcard needs a domain name, not an IP address", h)
		}
		return "*." + c, nil
	}
	return c, nil
}

// CanonicalHost returns host's canonical form, or an error saying why it is
// not an acceptable host:
//
//   - an IP literal (IPv6 with or without brackets) becomes its canonical
//     spelling; zones are refused; IPv4 must be dotted decimal — other
//     spellings resolvers accept (127.1, 0x7f000001, 0177.0.0.1,
//     2130706433) are refused, as is any name whose last label is numeric;
//   - a name is lower-cased and loses one trailing dot; it must be ASCII
//     letters, digits and hyphens in labels of 1 to 63 bytes (253 in all),
//     no label starting or ending with a hyphen, and "xn--" labels must be
//     valid punycode in canonical form. Non-ASCII hosts are refused:
//     clients send the punycode form.
func CanonicalHost(host string) (string, error) {
	if host == "" {
		return "", errors.New("empty host")
	}
	if len(host) > 255 {
		return "", fmt.Errorf("host of %d bytes is too long", len(host))
	}
	if strings.HasPrefix(host, "[") || strings.Contains(host, ":") {
		h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		ip, err := netip.ParseAddr(h)
		if err != nil || !ip.Is6() || strings.Count(host, "[") != strings.Count(host, "]") {
			return "", fmt.Errorf("%q is not a valid IPv6 address", host)
		}
		if ip.Zone() != "" {
			return "", fmt.Errorf("%q: IPv6 zones are not allowed", host)
		}
		return ip.String(), nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		return ip.String(), nil
	}
	if !isASCII(host) {
		return "", fmt.Errorf("%q is not ASCII: use its punycode (xn--) form", host)
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "" || len(name) > 253 {
		return "", fmt.Errorf("%q is not a valid host name", host)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return "", fmt.Errorf("%q is not a valid host name: %v", host, err)
		}
	}
	if last := labels[len(labels)-1]; looksNumeric(last) {
		return "", fmt.Errorf("%q looks like an IPv4 address but is not in dotted-decimal form", host)
	}
	return name, nil
}

func checkLabel(l string) error {
	if l == "" || len(l) > 63 {
		return fmt.Errorf("label %q must be 1 to 63 characters", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("label %q has a character other than a-z, 0-9 and '-'", l)
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	if len(l) >= 4 && l[2:4] == "--" {
		if !strings.HasPrefix(l, "xn--") {
			return fmt.Errorf("label %q has '--' in positions 3-4 (reserved for IDNA)", l)
		}
		u, err := idna.Lookup.ToUnicode(l)
		if err != nil {
			return fmt.Errorf("label %q is not valid punycode: %v", l, err)
		}
		back, err := idna.Lookup.ToASCII(u)
		if err != nil || back != l {
			return fmt.Errorf("label %q is not canonical punycode", l)
		}
	}
	return nil
}

// looksNumeric: a last label of only digits, or 0x and hex digits, makes
// a resolver read the host as an IPv4 address (WHATWG URL rules).
func looksNumeric(s string) bool {
	if h, ok := strings.CutPrefix(s, "0x"); ok {
		for _, c := range h {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// isToken reports whether s is an HTTP token (RFC 9110 tchar), the syntax
// of a method.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
