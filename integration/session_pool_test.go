//go:build integration

package integration

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSessionFromPool: a new session with the default profile is served
// from the pool (a pool hit, no container created on its path), its first
// python_repl call runs in the REPL started ahead, state persists, the
// interpreter held for a one-shot call is gone, and its workspace is its
// own: empty, size-limited (limits.defaults.disk_bytes), never seen by
// the one-shot jobs that follow; on the local runner and Docker.
func TestSessionFromPool(t *testing.T) {
	const age = "import os\nst = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n" +
		"up = float(open('/proc/uptime').read().split()[0])\nup - int(st[19]) / os.sysconf('SC_CLK_TCK')"
	for _, rc := range []struct{ name, config string }{
		{"local", "pool:\n  size: 1\n"},
		{"docker", runtimePoolConfig("docker", "", 1)},
	} {
		t.Run(rc.name, func(t *testing.T) {
			if rc.name == "docker" {
				needDocker(t)
			}
			s := startServer(t, rc.config+"limits:\n  defaults:\n    disk_bytes: 33554432\n")
			if err := waitPoolReady(s.MetricsURL, 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			hits := metricValue(t, s, "sandboxd_pool_hits_total")
			var ses struct{ ID, State string }
			resp, data := s.do("POST", "/v1/sessions", "", map[string]any{}, &ses)
			if resp.StatusCode != 201 || ses.State != "active" {
				t.Fatalf("create session: %d %s", resp.StatusCode, data)
			}
			if h := metricValue(t, s, "sandboxd_pool_hits_total"); h != hits+1 {
				t.Errorf("pool hits %v → %v: the session did not take the pooled sandbox", hits, h)
			}
			call := func(tool string, args map[string]any) jobView {
				t.Helper()
				var j jobView
				resp, data := s.do("POST", "/v1/jobs?wait=true", "", map[string]any{"tool": tool, "arguments": args, "session_id": ses.ID}, &j)
				if resp.StatusCode != 200 || j.Result == nil {
					t.Fatalf("%s in session: %d %s", tool, resp.StatusCode, data)
				}
				return j
			}
			j := call("python_repl", map[string]any{"code": age})
			if a, err := strconv.ParseFloat(strings.TrimSpace(j.Result.Content), 64); err != nil || a < 0.5 {
				t.Errorf("first call's interpreter is %q s old: not the REPL started ahead (%v)", j.Result.Content, err)
			}
			call("python_repl", map[string]any{"code": "import os\nx = 41\nopen('mine.txt', 'w').write('s')"})
			j = call("python_repl", map[string]any{"code": "x + 1, os.getcwd(), sorted(os.listdir('.'))"})
			if !strings.Contains(j.Result.Content, "(42, '/workspace', ['mine.txt'])") {
				t.Errorf("session state or workspace: %+v", j.Result)
			}
			j = call("bash", map[string]any{"command": `for d in /proc/[0-9]*; do tr '\0' ' ' <$d/cmdline 2>/dev/null; echo; done; df -k /workspace | tail -1`})
			if strings.Contains(j.Result.Content, "-I -S -B -u -c") {
				t.Errorf("the one-shot interpreter held in the pooled sandbox still runs in the session:\n%s", j.Result.Content)
			}
			if f := strings.Fields(lastLine(j.Result.Content)); len(f) < 2 || f[1] == "" {
				t.Errorf("df: %q", j.Result.Content)
			} else if kb, _ := strconv.Atoi(f[1]); kb <= 0 || kb > 33*1024 {
				t.Errorf("the session's workspace is %s KiB, want at most the 32 MiB disk limit", f[1])
			}
			one := s.run("", "python_repl", map[string]any{"code": "import os\nsorted(os.listdir('.'))"})
			if strings.Contains(one.Result.Content, "mine.txt") {
				t.Errorf("a one-shot job sees the session's workspace: %+v", one.Result)
			}
			s.do("DELETE", "/v1/sessions/"+ses.ID, "", nil, nil)
		})
	}
}

func metricValue(t *testing.T, s *server, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(s.getMetrics()), "\n") {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return 0
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
