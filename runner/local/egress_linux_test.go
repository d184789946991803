package local

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/egress"
	"github.com/sandboxd/sandboxd/policy"
	"github.com/sandboxd/sandboxd/runner"
	"github.com/sandboxd/sandboxd/runner/runnertest"
)

// TestEgressConcurrentExecs: every Exec has its own network namespace and
// proxy listener; concurrent Execs all reach the one Egress of their
// sandbox, and nothing (descriptors, listeners) outlives the Execs.
func TestEgressConcurrentExecs(t *testing.T) {
	r := newTestRunner(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "origin says hi")
	}))
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	p, err := egress.New(egress.Options{Resolver: resolverFunc(func(host string) []string {
		if host == "allowed.test" {
			return []string{"127.0.0.1"}
		}
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	eg := p.For(egress.Scope{Tenant: "t", Policy: &policy.EgressPolicy{
		Allow:             []policy.EgressRule{{Host: "allowed.test", Ports: []int{port}}},
		AllowPrivateCIDRs: []string{"127.0.0.0/8"},
	}})
	sb, err := r.Create(t.Context(), runner.SandboxSpec{Isolation: runnertest.Isolation(runner.WorkspaceNone, runner.NetworkEgress), Egress: eg})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(t.Context())
	fdsBefore := openFDs(t)
	script := fmt.Sprintf(`import urllib.request
print(urllib.request.urlopen("http://allowed.test:%d/", timeout=10).read().decode())`, port)
	proxy := "http_proxy=http://" + runner.EgressProxyAddr
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sb.Exec(t.Context(), runner.Process{Args: []string{"/usr/bin/python3", "-c", script}, Env: []string{proxy}, Timeout: 30 * time.Second})
			if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "origin says hi" {
				t.Errorf("exec: %v exit %d stdout %q stderr %q", err, res.ExitCode, res.Stdout, res.Stderr)
			}
		}()
	}
	wg.Wait()
	// The per-Exec listeners are closed once the Execs end.
	deadline := time.Now().Add(5 * time.Second)
	for openFDs(t) > fdsBefore {
		if time.Now().After(deadline) {
			t.Fatalf("descriptors: %d before the Execs, %d after", fdsBefore, openFDs(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type resolverFunc func(host string) []string

func (f resolverFunc) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range f(host) {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
