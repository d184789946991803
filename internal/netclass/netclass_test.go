package netclass

import (
	"net/netip"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip   string
		want string // substring of the reason; "" = allowed
	}{
		// public
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"93.184.216.34", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.169.0.1", ""},
		{"198.17.255.255", ""},
		{"198.20.0.0", ""},
		{"223.255.255.255", ""},
		{"2606:4700:4700::1111", ""},
		{"2001:4860:4860::8888", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"2002:808:808::1", ""},
		// IPv4 special ranges, edges included
		{"0.0.0.0", "this network"},
		{"0.255.255.255", "this network"},
		{"10.0.0.0", "private"},
		{"10.255.255.255", "private"},
		{"100.64.0.0", "carrier-grade NAT"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"100.100.100.200", "metadata"},
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"169.254.0.1", "link-local"},
		{"169.254.169.254", "metadata"},
		{"172.16.0.0", "private"},
		{"172.31.255.255", "private"},
		{"192.0.0.8", "IETF protocol"},
		{"192.0.2.1", "documentation"},
		{"192.31.196.1", "AS112"},
		{"192.52.193.1", "AMT"},
		{"192.88.99.1", "6to4 relay"},
		{"192.168.0.1", "private"},
		{"192.168.255.255", "private"},
		{"192.175.48.1", "AS112"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.254", "reserved"},
		{"255.255.255.255", "broadcast"},
		// IPv6 special ranges
		{"::", "unspecified"},
		{"::1", "loopback"},
		{"fe80::1", "link-local"},
		{"febf:ffff::1", "link-local"},
		{"fec0::1", "site-local"},
		{"fc00::1", "unique local"},
		{"fdff:ffff::1", "unique local"},
		{"fd00:ec2::254", "metadata"},
		{"ff02::1", "multicast"},
		{"ff05::2", "multicast"},
		{"100::1", "discard"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"2001::1", "Teredo"},
		{"2001:2::1", "IETF protocol"},
		{"2001:10::1", "IETF protocol"},
		{"5f00::1", "SRv6"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"4000::1", "not a global unicast"},
		{"1::1", "not a global unicast"},
		// IPv4 embedded in IPv6, every form
		{"::ffff:127.0.0.1", "IPv4-mapped loopback"},
		{"::ffff:7f00:1", "IPv4-mapped loopback"},
		{"::ffff:169.254.169.254", "IPv4-mapped cloud metadata"},
		{"::ffff:10.0.0.1", "IPv4-mapped private"},
		{"::ffff:0.0.0.0", "IPv4-mapped"},
		{"::127.0.0.1", "IPv4-compatible loopback"},
		{"::7f00:1", "IPv4-compatible loopback"},
		{"::8.8.8.8", "IPv4-compatible IPv6 address (deprecated"},
		{"::a9fe:a9fe", "IPv4-compatible cloud metadata"},
		{"64:ff9b::127.0.0.1", "NAT64 loopback"},
		{"64:ff9b::a9fe:a9fe", "NAT64 cloud metadata"},
		{"64:ff9b::c0a8:1", "NAT64 private"},
		{"2002:7f00:1::", "6to4 loopback"},
		{"2002:a9fe:a9fe::1", "6to4 cloud metadata"},
		{"2002:c0a8:101::1", "6to4 private"},
		{"2002:0a00:0001::", "6to4 private"},
		// zones
		{"fe80::1%eth0", "zone"},
		{"2606:4700::1%eth0", "zone"},
	}
	for _, tc := range tests {
		t.Run(tc.ip, func(t *testing.T) {
			t.Parallel()
			ip, err := netip.ParseAddr(tc.ip)
			if err != nil {
				t.Fatal(err)
			}
			got := Classify(ip)
			if tc.want == "" && got != "" {
				t.Errorf("refused: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("reason %q, want %q", got, tc.want)
			}
		})
	}
	if Classify(netip.Addr{}) == "" {
		t.Error("zero Addr allowed")
	}
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		want string // "" allowed
	}{
		{"example.com", ""},
		{"sub.example.org", ""},
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
		{"[2606:4700:4700::1111]", ""},
		{"xn--nxasmq6b.example", ""},
		{"1example.example", ""},
		{"0xdeadbeef.example.com", ""},
		// loopback in every spelling
		{"127.0.0.1", "loopback"},
		{"127.1", "loopback"},
		{"127.0.1", "loopback"},
		{"2130706433", "loopback"},
		{"0x7f000001", "loopback"},
		{"0X7F000001", "loopback"},
		{"0x7f.1", "loopback"},
		{"0177.0.0.1", "loopback"},
		{"0177.1", "loopback"},
		{"017700000001", "loopback"},
		{"127.0.0.1.", "loopback"},
		{"0x7f.0x00.0x00.0x01", "loopback"},
		{"::1", "loopback"},
		{"[::1]", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"[::ffff:127.0.0.1]", "loopback"},
		{"[::ffff:7f00:1]", "loopback"},
		{"[0:0:0:0:0:ffff:7f00:1]", "loopback"},
		{"localhost", "loopback"},
		{"LOCALHOST.", "loopback"},
		{"foo.localhost", "loopback"},
		// metadata and private in odd spellings
		{"169.254.169.254", "metadata"},
		{"2852039166", "metadata"},
		{"0xa9fea9fe", "metadata"},
		{"0251.0376.0251.0376", "metadata"},
		{"169.254.43518", "metadata"},
		{"[fd00:ec2::254]", "metadata"},
		{"100.100.100.200", "metadata"},
		{"10.1", "private"},
		{"167772161", "private"},
		{"0", "this network"},
		{"0.0.0.0", "this network"},
		{"[::]", "unspecified"},
		{"[fe80::1%25eth0]", "zone"},
		{"fe80::1%eth0", "zone"},
		// public but not canonical: refused too
		{"134744072", "dotted-decimal"},
		{"0x08080808", "dotted-decimal"},
		{"8.8.2056", "dotted-decimal"},
		{"010.8.8.8", "dotted-decimal"},
		// numeric-looking but invalid
		{"256.1.1.1", "invalid numeric host"},
		{"1.2.3.4.5", "invalid numeric host"},
		{"127.0.0.0x", ""}, // "0x" is 0 (WHATWG); 127.0.0.0 is loopback
		{"4294967296", "invalid numeric host"},
		{"99999999999999999999999", "invalid numeric host"},
		{"1.2.3.09", "invalid numeric host"},
		{"abc.123", "invalid numeric host"},
		{"[::ffff:zz]", "invalid IPv6"},
		{"", "no host"},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			t.Parallel()
			err := CheckHost(tc.host)
			switch {
			case tc.host == "127.0.0.0x":
				if err == nil || !strings.Contains(err.Error(), "loopback") {
					t.Errorf("got %v", err)
				}
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseNumericHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"127.1":                "127.0.0.1",
		"2130706433":           "127.0.0.1",
		"0x7f000001":           "127.0.0.1",
		"0177.0.0.1":           "127.0.0.1",
		"1.2.3":                "1.2.0.3",
		"1.65535":              "1.0.255.255",
		"0":                    "0.0.0.0",
		"4294967295":           "255.255.255.255",
		"::ffff:7f00:1":        "::ffff:127.0.0.1",
		"[2001:db8::1]":        "2001:db8::1",
		"0x7f.0x0.0x0.0x1":     "127.0.0.1",
		"0x7f.0.0.1.":          "127.0.0.1",
		"00000000000000000001": "0.0.0.1",
	} {
		ip, err := parseNumericHost(host)
		if err != nil || ip.String() != want {
			t.Errorf("%s: got %v %v, want %s", host, ip, err, want)
		}
	}
}

func FuzzClassifyHost(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "[::ffff:127.0.0.1]",
		"[::ffff:7f00:1]", "169.254.169.254", "example.com", "8.8.8.8", "2002:7f00:1::", "64:ff9b::1",
		"fe80::1%eth0", "localhost", "0x", "1.2.3.4.5", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		err := CheckHost(host)
		ip, perr := parseNumericHost(host)
		if perr == nil {
			// Whatever the spelling, an accepted numeric host is a
			// canonical public address.
			if why := Classify(ip); why != "" && err == nil {
				t.Fatalf("CheckHost(%q) allowed %s (%s)", host, ip, why)
			}
			if err == nil && ip.Is4() && strings.Trim(host, "[]") != ip.String() {
				t.Fatalf("CheckHost(%q) allowed a non-canonical spelling of %s", host, ip)
			}
		}
		// Everything the standard parser reads as an address must agree.
		if std, e := netip.ParseAddr(host); e == nil && Classify(std) != "" && err == nil {
			t.Fatalf("CheckHost(%q) allowed %s", host, std)
		}
	})
}
