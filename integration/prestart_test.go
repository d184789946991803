//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPrestartSameResult: a one-shot python_repl served by a pooled
// sandbox whose interpreter was started ahead (the default) returns the
// job record a sandboxd with pool.no_prestart returns, call by call, on
// the local runner, Docker and (when set up) containerd under runc and
// gVisor; and the call did run in the interpreter started ahead.
func TestPrestartSameResult(t *testing.T) {
	codes := []string{
		"print(1)",
		"x = 6 * 7\nx",
		"import sys\nprint('out')\nprint('err', file=sys.stderr)",
		"def f():\n    raise ValueError('boom')\nf()",
		"import sys\nsys.exit(3)",
		"import os, sys\n(os.getcwd(), sys.stdin.read(), sorted(os.environ), os.getuid(), sys.path[0], sorted(os.listdir('.')))",
		"print('y' * 300000)",
	}
	// age prints how long the interpreter has been running.
	const age = "import os\nst = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n" +
		"up = float(open('/proc/uptime').read().split()[0])\nprint(up - int(st[19]) / os.sysconf('SC_CLK_TCK'))"
	for _, rc := range []struct{ name, runner, runtime string }{
		{"local", "", ""}, {"docker", "docker", ""}, {"containerd", "containerd", ""}, {"containerd-runsc", "containerd", "runsc"},
	} {
		t.Run(rc.name, func(t *testing.T) {
			config := "pool:\n  size: 1\n"
			switch {
			case rc.runner == "docker":
				needDocker(t)
				config = runtimePoolConfig("docker", "", 1)
			case rc.runner == "containerd":
				needContainerd(t, rc.runtime)
				config = runtimePoolConfig("containerd", rc.runtime, 1)
			}
			warm := startServer(t, config)
			cold := startServer(t, config+"  no_prestart: true\n")
			run := func(s *server, code string) jobView {
				t.Helper()
				if err := waitPoolReady(s.MetricsURL, 1); err != nil {
					t.Fatal(err)
				}
				return s.run("", "python_repl", map[string]any{"code": code})
			}
			for _, code := range codes {
				got, want := run(warm, code), run(cold, code)
				g, _ := json.Marshal(comparable(got))
				w, _ := json.Marshal(comparable(want))
				if string(g) != string(w) {
					t.Errorf("%q: prestarted\n%s\nagainst started at the call\n%s", code, g, w)
				}
			}
			ageOf := func(s *server) float64 {
				t.Helper()
				j := run(s, age)
				v, err := strconv.ParseFloat(strings.TrimSpace(j.Result.Content), 64)
				if err != nil {
					t.Fatalf("age: %+v", j.Result)
				}
				return v
			}
			// The pool has been ready since at least the last call: the
			// prestarted interpreter is older than that call took.
			if err := waitPoolReady(warm.MetricsURL, 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if a := ageOf(warm); a < 0.5 {
				t.Errorf("the interpreter of a pooled one-shot is %.3fs old: not the one started ahead", a)
			}
			if err := waitPoolReady(cold.MetricsURL, 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second)
			if a := ageOf(cold); a >= 0.5 {
				t.Errorf("with pool.no_prestart the interpreter is %.3fs old", a)
			}
		})
	}
}

// comparable is what a client reads of a finished job, without its id,
// timings and usage.
func comparable(j jobView) any {
	return struct {
		State, Reason string
		Result        any
	}{j.State, j.Reason, j.Result}
}

// needContainerd skips unless containerd (with runtime: "" for runc) runs
// here with the python image imported; SANDBOXD_REQUIRE_CONTAINERD fails
// instead.
func needContainerd(t *testing.T, runtime string) {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("SANDBOXD_REQUIRE_CONTAINERD") != "" {
			t.Fatal(why)
		}
		t.Skip(why + " (scripts/containerd-setup.sh; set SANDBOXD_REQUIRE_CONTAINERD=1 to fail instead)")
	}
	if err := exec.Command("ctr", "-n", "sandboxd", "images", "check", "name==docker.io/sandboxd/python:latest").Run(); err != nil {
		skip("containerd not usable: " + err.Error())
	}
	if runtime != "" {
		if _, err := exec.LookPath(runtime); err != nil {
			skip(runtime + " not installed")
		}
	}
}
