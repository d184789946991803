package builtin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sandboxd/sandboxd/internal/netclass"
	"github.com/sandboxd/sandboxd/tools"
)

// TestHTTPRequestUnspecified is issue 9 item 2 against http_request: with
// allow_private_cidrs [0.0.0.0/0], [::/0] or both, "sandboxd's API" (a
// server the test starts on 127.0.0.1, protected) is never reached: not
// through 0.0.0.0 or :: in any spelling, not through DNS answers of them,
// not after a 302 from an allowed server, and not at its own address.
func TestHTTPRequestUnspecified(t *testing.T) {
	t.Parallel()
	var apiHits atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiHits.Add(1)
		fmt.Fprint(w, "sandboxd_metrics 1")
	}))
	t.Cleanup(api.Close)
	port := api.Listener.Addr().(*net.TCPAddr).Port
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, "http://"+to+"/metrics", http.StatusFound)
			return
		}
		fmt.Fprint(w, "open")
	}))
	t.Cleanup(open.Close)
	prot := netclass.NewProtected()
	prot.AddListener("API", api.Listener.Addr())
	answers := map[string]string{
		"zero.test": "0.0.0.0", "zero6.test": "::", "mapped0.test": "::ffff:0.0.0.0", "zeronet.test": "0.9.9.9",
		"compat.test": "::127.0.0.1", "nat64.test": "64:ff9b::7f00:1", "6to4.test": "2002:7f00:1::",
		"api.test": "127.0.0.1",
	}
	hooks := &httpHooks{lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := answers[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return nil, errors.New("no such host in test resolver")
	}, dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		// Whatever the guard decides, connect to the test's open server
		// only.
		if addr != open.Listener.Addr().String() {
			t.Errorf("dialled %s", addr)
			return nil, fmt.Errorf("test: refusing to dial %s", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	var hosts []string
	for h := range answers {
		hosts = append(hosts, h)
	}
	hosts = append(hosts, "0.0.0.0", "0", "0x0", "00", "0.0", "0.0.0", "000.0.0.0", "[::]", "[0:0::0]", "[::ffff:0:0]",
		"[::ffff:0.0.0.0]", "[::127.0.0.1]", "[64:ff9b::127.0.0.1]", "127.0.0.1", "localhost", "[::ffff:127.0.0.1]")
	for _, cidrs := range [][]string{{"0.0.0.0/0"}, {"::/0"}, {"0.0.0.0/0", "::/0"}} {
		var allow []netip.Prefix
		for _, c := range cidrs {
			allow = append(allow, netip.MustParsePrefix(c))
		}
		opts := &tools.HTTPOptions{Guard: netclass.NewGuard(allow, prot)}
		t.Run(strings.Join(cidrs, ","), func(t *testing.T) {
			for _, h := range hosts {
				r := httpCall(t, hooks, opts, map[string]any{"url": fmt.Sprintf("http://%s:%d/metrics", h, port)})
				if r.OK || !strings.Contains(r.Error, "refused") || len(r.Effects) != 0 {
					t.Errorf("%s: %+v", h, r)
				}
			}
			for _, to := range []string{fmt.Sprintf("0.0.0.0:%d", port), fmt.Sprintf("[::]:%d", port), fmt.Sprintf("zero.test:%d", port),
				fmt.Sprintf("0:%d", port), fmt.Sprintf("127.0.0.1:%d", port)} {
				r := httpCall(t, hooks, opts, map[string]any{"url": open.URL + "/?to=" + to})
				if r.OK || !strings.Contains(r.Error, "refused") {
					t.Errorf("redirect to %s: %+v", to, r)
				}
			}
		})
	}
	// The allowed server is reachable with the same guard (the checks
	// refuse what they must, not everything).
	if r := httpCall(t, hooks, &tools.HTTPOptions{Guard: netclass.NewGuard([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, prot)},
		map[string]any{"url": open.URL}); !r.OK || !strings.Contains(r.Content, "open") {
		t.Errorf("allowed server: %+v", r)
	}
	t.Cleanup(func() {
		if n := apiHits.Load(); n != 0 {
			t.Errorf("the protected server answered %d requests", n)
		}
	})
}
