// Package netclass decides which network addresses a sandbox's traffic may
// reach: only public unicast addresses. Everything an attacker could use to
// reach the host, the cluster or a cloud metadata service is refused, in
// every spelling. The in-process http_request tool (tools/builtin) and the
// egress proxy (egress) both judge addresses here; it imports nothing of
// sandboxd.
package netclass

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// blockedRange is one refused range and why.
type blockedRange struct {
	prefix netip.Prefix
	reason string
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// Exact metadata endpoints come first so they get the precise reason.
var blockedV4 = []blockedRange{
	{mustPrefix("169.254.169.254/32"), "cloud metadata service"},
	{mustPrefix("100.100.100.200/32"), "cloud metadata service"},
	{mustPrefix("0.0.0.0/8"), "\"this network\" / unspecified address"},
	{mustPrefix("10.0.0.0/8"), "private network (RFC 1918)"},
	{mustPrefix("100.64.0.0/10"), "carrier-grade NAT shared space (RFC 6598)"},
	{mustPrefix("127.0.0.0/8"), "loopback"},
	{mustPrefix("169.254.0.0/16"), "link-local"},
	{mustPrefix("172.16.0.0/12"), "private network (RFC 1918)"},
	{mustPrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{mustPrefix("192.0.2.0/24"), "documentation range (TEST-NET-1)"},
	{mustPrefix("192.31.196.0/24"), "AS112 anycast"},
	{mustPrefix("192.52.193.0/24"), "AMT relay anycast"},
	{mustPrefix("192.88.99.0/24"), "6to4 relay anycast (deprecated)"},
	{mustPrefix("192.168.0.0/16"), "private network (RFC 1918)"},
	{mustPrefix("192.175.48.0/24"), "AS112 direct delegation"},
	{mustPrefix("198.18.0.0/15"), "benchmarking range"},
	{mustPrefix("198.51.100.0/24"), "documentation range (TEST-NET-2)"},
	{mustPrefix("203.0.113.0/24"), "documentation range (TEST-NET-3)"},
	{mustPrefix("224.0.0.0/4"), "multicast"},
	{mustPrefix("255.255.255.255/32"), "broadcast"},
	{mustPrefix("240.0.0.0/4"), "reserved (class E)"},
}

var blockedV6 = []blockedRange{
	{mustPrefix("fd00:ec2::254/128"), "cloud metadata service"},
	{mustPrefix("::/128"), "unspecified address"},
	{mustPrefix("::1/128"), "loopback"},
	{mustPrefix("64:ff9b:1::/48"), "local-use NAT64 (RFC 8215)"},
	{mustPrefix("100::/64"), "discard-only range"},
	{mustPrefix("2001::/32"), "Teredo tunnelling"},
	{mustPrefix("2001:db8::/32"), "documentation range"},
	{mustPrefix("2001::/23"), "IETF protocol assignments"},
	{mustPrefix("3fff::/20"), "documentation range"},
	{mustPrefix("5f00::/16"), "SRv6 SIDs"},
	{mustPrefix("fc00::/7"), "unique local address (private)"},
	{mustPrefix("fe80::/10"), "link-local"},
	{mustPrefix("fec0::/10"), "site-local (deprecated)"},
	{mustPrefix("ff00::/8"), "multicast"},
}

var (
	mappedV4  = mustPrefix("::ffff:0:0/96")
	compatV4  = mustPrefix("::/96")
	nat64     = mustPrefix("64:ff9b::/96")
	sixToFour = mustPrefix("2002::/16")
	globalV6  = mustPrefix("2000::/3")
)

// IP reports why ip must not be contacted, or "" when it is a public
// unicast address. IPv6 forms that carry an IPv4 address (IPv4-mapped,
// IPv4-compatible, NAT64, 6to4) are judged by the address they carry.
func Classify(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid address"
	}
	if ip.Zone() != "" {
		return "address with a zone (link-local scope)"
	}
	if ip.Is4() {
		for _, r := range blockedV4 {
			if r.prefix.Contains(ip) {
				return r.reason
			}
		}
		return ""
	}
	// Forms carrying an IPv4 address.
	a := ip.As16()
	switch {
	case mappedV4.Contains(ip):
		if why := Classify(netip.AddrFrom4([4]byte(a[12:16]))); why != "" {
			return "IPv4-mapped " + why
		}
		return ""
	case ip == netip.IPv6Unspecified():
		return "unspecified address"
	case ip == netip.IPv6Loopback():
		return "loopback"
	case compatV4.Contains(ip):
		if why := Classify(netip.AddrFrom4([4]byte(a[12:16]))); why != "" {
			return "IPv4-compatible " + why
		}
		return "IPv4-compatible IPv6 address (deprecated, not routable)"
	case nat64.Contains(ip):
		if why := Classify(netip.AddrFrom4([4]byte(a[12:16]))); why != "" {
			return "NAT64 " + why
		}
		return ""
	case sixToFour.Contains(ip):
		if why := Classify(netip.AddrFrom4([4]byte(a[2:6]))); why != "" {
			return "6to4 " + why
		}
		return ""
	}
	for _, r := range blockedV6 {
		if r.prefix.Contains(ip) {
			return r.reason
		}
	}
	if !globalV6.Contains(ip) {
		return "not a global unicast IPv6 address"
	}
	return ""
}

var errNotNumeric = errors.New("not a numeric host")

// parseNumericHost reads host as an IP address in any spelling a resolver
// or browser might accept: IPv6 (with or without brackets and zone), dotted
// IPv4 with 1 to 4 parts in decimal, octal (leading 0) or hex (0x) — 127.1,
// 0177.0.0.1, 0x7f000001, 2130706433 — and a trailing dot. It returns
// errNotNumeric for names, and another error for hosts that look numeric
// (their last label is a number, as the WHATWG URL standard decides) but do
// not parse.
func parseNumericHost(host string) (netip.Addr, error) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.Contains(h, ":") {
		ip, err := netip.ParseAddr(h)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("invalid IPv6 address %q", host)
		}
		return ip, nil
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" {
		return netip.Addr{}, errNotNumeric
	}
	parts := strings.Split(h, ".")
	if _, ok := parseIPv4Part(parts[len(parts)-1]); !ok && !looksNumeric(parts[len(parts)-1]) {
		return netip.Addr{}, errNotNumeric
	}
	if len(parts) > 4 {
		return netip.Addr{}, fmt.Errorf("invalid numeric host %q", host)
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, fmt.Errorf("invalid numeric host %q", host)
		}
		nums[i] = n
	}
	// All but the last part are single bytes; the last fills the rest.
	var v uint64
	for _, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, fmt.Errorf("invalid numeric host %q", host)
		}
		v = v<<8 | n
	}
	rest := uint(8 * (5 - len(nums)))
	last := nums[len(nums)-1]
	if last >= 1<<rest {
		return netip.Addr{}, fmt.Errorf("invalid numeric host %q", host)
	}
	v = v<<rest | last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}

// looksNumeric: a last label made only of digits, or 0x followed by hex
// digits, makes the host an (attempted) IPv4 address.
func looksNumeric(s string) bool {
	if s == "" {
		return false
	}
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		s = s[2:]
		for _, c := range s {
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
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
	return true
}

func parseIPv4Part(s string) (uint64, bool) {
	if s == "" || len(s) > 34 {
		return 0, false
	}
	base := 10
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		base, s = 16, s[2:]
		if s == "" {
			return 0, true // "0x" is 0 in inet_aton and WHATWG
		}
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	if s[0] == '+' || s[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseUint(s, base, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// Host is the guard's early check on a URL's host, before any DNS
// lookup. A numeric host in any spelling is judged by its address, and only
// its canonical spelling is accepted; "localhost" names are refused. Other
// names pass here and are judged at dial time by the addresses they
// resolve to.
func CheckHost(host string) error {
	if host == "" {
		return errors.New("URL has no host")
	}
	lower := strings.ToLower(strings.TrimSuffix(host, "."))
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") || lower == "localhost.localdomain" {
		return fmt.Errorf("host %q is refused: loopback", host)
	}
	ip, err := parseNumericHost(host)
	switch {
	case errors.Is(err, errNotNumeric):
		return nil
	case err != nil:
		return fmt.Errorf("host %q is refused: %v", host, err)
	}
	if why := Classify(ip); why != "" {
		return fmt.Errorf("host %q is refused: %s (%s)", host, why, ip)
	}
	canon := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip.Is4() && canon != ip.String() {
		return fmt.Errorf("host %q is refused: write the IPv4 address in dotted-decimal form (%s)", host, ip)
	}
	return nil
}
