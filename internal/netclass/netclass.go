// Package netclass decides which network addresses sandboxd may connect to
// on a tenant's behalf: only public unicast addresses, unless the tenant's
// allow_private_cidrs lets some special ones through, and never this host's
// unspecified addresses nor sandboxd's own addresses. Everything an
// attacker could use to reach the host, the cluster or a cloud metadata
// service is refused, in every spelling.
//
// Judge and Classify sort addresses; Protected is the set of sandboxd's
// own addresses; Guard is the one check built from both, and Dialer
// connects only where a Guard allows. The egress proxy (egress), the
// in-process http_request tool (tools/builtin) and every later caller of a
// tenant's URL use them; the package imports nothing of sandboxd.
package netclass

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Class is what an address is to the guard (see Guard).
type Class uint8

const (
	// Public addresses (global unicast) may be reached.
	Public Class = iota
	// Special addresses (loopback, private, link-local, CGNAT, multicast,
	// reserved, documentation ...) are refused unless a tenant's
	// allow_private_cidrs covers them.
	Special
	// Metadata addresses (cloud metadata services) are refused unless
	// allow_private_cidrs lists them as a single address (/32, /128).
	Metadata
	// ThisHost addresses are refused always, whatever allow_private_cidrs
	// says: the unspecified addresses (0.0.0.0/8, ::), which on Linux
	// connect to the local host and so bypass every check of the address
	// actually reached; IPv6 forms that carry such an address or an IPv4
	// loopback address (IPv4-compatible, IPv4-translated, NAT64, 6to4,
	// Teredo, ISATAP: a translator or tunnel would deliver them to its own
	// host); zoned and invalid addresses.
	ThisHost
)

func (c Class) String() string {
	switch c {
	case Public:
		return "public"
	case Special:
		return "special"
	case Metadata:
		return "metadata"
	case ThisHost:
		return "this-host"
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// blockedRange is one refused range and why.
type blockedRange struct {
	prefix netip.Prefix
	class  Class
	reason string
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// unspecifiedReason is the reason of 0.0.0.0/8 and ::.
const unspecifiedReason = "unspecified address (connects to this host)"

// Exact metadata endpoints come first so they get the precise reason.
var blockedV4 = []blockedRange{
	{mustPrefix("169.254.169.254/32"), Metadata, "cloud metadata service"},
	{mustPrefix("100.100.100.200/32"), Metadata, "cloud metadata service"},
	{mustPrefix("0.0.0.0/8"), ThisHost, "\"this network\" / " + unspecifiedReason},
	{mustPrefix("10.0.0.0/8"), Special, "private network (RFC 1918)"},
	{mustPrefix("100.64.0.0/10"), Special, "carrier-grade NAT shared space (RFC 6598)"},
	{mustPrefix("127.0.0.0/8"), Special, "loopback"},
	{mustPrefix("169.254.0.0/16"), Special, "link-local"},
	{mustPrefix("172.16.0.0/12"), Special, "private network (RFC 1918)"},
	{mustPrefix("192.0.0.0/24"), Special, "IETF protocol assignments"},
	{mustPrefix("192.0.2.0/24"), Special, "documentation range (TEST-NET-1)"},
	{mustPrefix("192.31.196.0/24"), Special, "AS112 anycast"},
	{mustPrefix("192.52.193.0/24"), Special, "AMT relay anycast"},
	{mustPrefix("192.88.99.0/24"), Special, "6to4 relay anycast (deprecated)"},
	{mustPrefix("192.168.0.0/16"), Special, "private network (RFC 1918)"},
	{mustPrefix("192.175.48.0/24"), Special, "AS112 direct delegation"},
	{mustPrefix("198.18.0.0/15"), Special, "benchmarking range"},
	{mustPrefix("198.51.100.0/24"), Special, "documentation range (TEST-NET-2)"},
	{mustPrefix("203.0.113.0/24"), Special, "documentation range (TEST-NET-3)"},
	{mustPrefix("224.0.0.0/4"), Special, "multicast"},
	{mustPrefix("255.255.255.255/32"), Special, "broadcast"},
	{mustPrefix("240.0.0.0/4"), Special, "reserved (class E)"},
}

var blockedV6 = []blockedRange{
	{mustPrefix("fd00:ec2::254/128"), Metadata, "cloud metadata service"},
	{mustPrefix("100::/64"), Special, "discard-only range"},
	{mustPrefix("2001:db8::/32"), Special, "documentation range"},
	{mustPrefix("2001::/23"), Special, "IETF protocol assignments"},
	{mustPrefix("3fff::/20"), Special, "documentation range"},
	{mustPrefix("5f00::/16"), Special, "SRv6 SIDs"},
	{mustPrefix("fc00::/7"), Special, "unique local address (private)"},
	{mustPrefix("fe80::/10"), Special, "link-local"},
	{mustPrefix("fec0::/10"), Special, "site-local (deprecated)"},
	{mustPrefix("ff00::/8"), Special, "multicast"},
}

var (
	mappedV4     = mustPrefix("::ffff:0:0/96")
	translatedV4 = mustPrefix("::ffff:0:0:0/96") // SIIT (RFC 2765)
	compatV4     = mustPrefix("::/96")
	nat64        = mustPrefix("64:ff9b::/96")
	nat64Local   = mustPrefix("64:ff9b:1::/48") // RFC 8215
	sixToFour    = mustPrefix("2002::/16")
	teredo       = mustPrefix("2001::/32")
	globalV6     = mustPrefix("2000::/3")
)

// Classify reports why ip must not be contacted, or "" when it is a public
// unicast address. IPv6 forms that carry an IPv4 address (IPv4-mapped,
// IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo, ISATAP) are
// judged by the address they carry. Judge also says how strictly.
func Classify(ip netip.Addr) string {
	_, why := Judge(ip)
	return why
}

// Judge returns ip's class and, unless it is Public, why it is refused.
func Judge(ip netip.Addr) (Class, string) {
	if !ip.IsValid() {
		return ThisHost, "invalid address"
	}
	if ip.Zone() != "" {
		return ThisHost, "address with a zone (link-local scope)"
	}
	if ip.Is4() {
		for _, r := range blockedV4 {
			if r.prefix.Contains(ip) {
				return r.class, r.reason
			}
		}
		return Public, ""
	}
	a := ip.As16()
	v4 := func(i int) netip.Addr { return netip.AddrFrom4([4]byte(a[i : i+4])) }
	switch {
	case ip == netip.IPv6Unspecified():
		return ThisHost, unspecifiedReason
	case ip == netip.IPv6Loopback():
		return Special, "loopback"
	case mappedV4.Contains(ip):
		// The kernel treats it as the IPv4 address itself.
		if c, why := Judge(v4(12)); c != Public {
			return c, "IPv4-mapped " + why
		}
		return Public, ""
	case compatV4.Contains(ip):
		return carried("IPv4-compatible", Special, "IPv4-compatible IPv6 address (deprecated, not routable)", v4(12))
	case translatedV4.Contains(ip):
		return carried("IPv4-translated", Special, "IPv4-translated address (SIIT)", v4(12))
	case nat64.Contains(ip):
		return carried("NAT64", Public, "", v4(12))
	case nat64Local.Contains(ip):
		// The operator picks the prefix length (RFC 6052): judge every
		// place an IPv4 address can sit.
		for _, c := range nat64Embeddings(a) {
			if isThisHost(c) {
				return carried("local-use NAT64", Special, "", c)
			}
		}
		return Special, "local-use NAT64 (RFC 8215)"
	case sixToFour.Contains(ip):
		return carried("6to4", Public, "", v4(2))
	case teredo.Contains(ip):
		// Server at bits 32-63, client (inverted) at bits 96-127.
		client := a[12:16]
		inv := netip.AddrFrom4([4]byte{^client[0], ^client[1], ^client[2], ^client[3]})
		for _, c := range []netip.Addr{v4(4), inv} {
			if isThisHost(c) {
				return carried("Teredo", Special, "", c)
			}
		}
		return Special, "Teredo tunnelling"
	}
	// ISATAP interface identifiers (RFC 5214) carry the IPv4 address of
	// the tunnel end point, under any prefix.
	if (a[8]|0x02 == 0x02) && a[9] == 0 && a[10] == 0x5e && a[11] == 0xfe && isThisHost(v4(12)) {
		return carried("ISATAP", Special, "", v4(12))
	}
	for _, r := range blockedV6 {
		if r.prefix.Contains(ip) {
			return r.class, r.reason
		}
	}
	if !globalV6.Contains(ip) {
		return Special, "not a global unicast IPv6 address"
	}
	return Public, ""
}

// carried judges an IPv6 form by the IPv4 address inner it carries: an
// unspecified or loopback inner address makes it ThisHost; otherwise the
// inner address's class when it is refused, else (class, reason) of the
// form itself.
func carried(form string, class Class, reason string, inner netip.Addr) (Class, string) {
	c, why := Judge(inner)
	switch {
	case isThisHost(inner):
		return ThisHost, form + " " + why + " (" + inner.String() + ")"
	case c != Public:
		return c, form + " " + why
	}
	return class, reason
}

// isThisHost: an IPv4 address that reaches the host it is sent from
// (0.0.0.0/8, 127.0.0.0/8).
func isThisHost(v4 netip.Addr) bool {
	b := v4.As4()
	return b[0] == 0 || b[0] == 127
}

// nat64Embeddings returns the IPv4 addresses an address under the
// local-use NAT64 prefix 64:ff9b:1::/48 may carry. The operator picks a
// NAT64 prefix of 48, 56, 64 or 96 bits inside it (RFC 6052 section 2.2),
// which the address does not say: it is read in every layout it fits (the
// "u" octet, bits 64-71, and the bits after the IPv4 address are zero). The
// 96-bit layout fits every address, but when a shorter one fits too the
// zero low bits are that layout's suffix, so it is read only when bits
// 48-95 are zero (the prefix 64:ff9b:1::/96) or no shorter layout fits.
func nat64Embeddings(a [16]byte) []netip.Addr {
	var out []netip.Addr
	if a[8] == 0 {
		for _, pos := range [][4]int{
			{6, 7, 9, 10},   // /48, suffix 11-15
			{7, 9, 10, 11},  // /56, suffix 12-15
			{9, 10, 11, 12}, // /64, suffix 13-15
		} {
			zero := true
			for _, b := range a[pos[3]+1:] {
				zero = zero && b == 0
			}
			if zero {
				out = append(out, netip.AddrFrom4([4]byte{a[pos[0]], a[pos[1]], a[pos[2]], a[pos[3]]}))
			}
		}
	}
	if len(out) == 0 || a[6]|a[7]|a[8]|a[9]|a[10]|a[11] == 0 {
		out = append(out, netip.AddrFrom4([4]byte(a[12:16])))
	}
	return out
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

// CheckHost is the early check of a URL's host for a caller that may reach
// public addresses only (no allow_private_cidrs, nothing protected): see
// Guard.CheckHost.
func CheckHost(host string) error {
	return publicOnly.CheckHost(host, 80)
}

var publicOnly = NewGuard(nil, nil)
