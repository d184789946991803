package job

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/internal/netclass"
)

// FuzzCheckCallbackURL: a tenant's callback_url never panics the check,
// and one it accepts is an absolute http(s) URL without credentials whose
// literal address, if it has one, is public or inside
// allow_private_cidrs (127.0.0.1/32 here).
func FuzzCheckCallbackURL(f *testing.F) {
	for _, s := range []string{
		"https://example.com/hook", "http://127.0.0.1:8080/x", "http://127.0.0.2/", "http://[::1]/", "http://10.0.0.1/",
		"http://0x7f.1/", "http://2130706433/", "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/", "ftp://x/",
		"http://u:p@example.com/", "//example.com", "http://localhost./", "http://[fe80::1%25eth0]/", "http://%31%32%37.0.0.1/",
	} {
		f.Add(s)
	}
	s := &Service{cfg: Config{
		CallbackSecrets: map[string]string{"t": "k"},
		CallbackPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	}}
	allow := netip.MustParsePrefix("127.0.0.1/32")
	f.Fuzz(func(t *testing.T, raw string) {
		if err := s.checkCallbackURL("t", raw); err != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.Host == "" {
			t.Fatalf("accepted %q (%v)", raw, err)
		}
		host := strings.TrimSuffix(strings.TrimPrefix(u.Hostname(), "["), "]")
		if ip, err := netip.ParseAddr(host); err == nil {
			ip = ip.Unmap()
			if class, _ := netclass.Judge(ip); class != netclass.Public && !allow.Contains(ip) {
				t.Fatalf("accepted %q: %s is %v", raw, ip, class)
			}
		}
	})
}
