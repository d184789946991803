//go:build integration

package integration

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMetricsPromtool(t *testing.T) {
	s := startServer(t, "")
	s.run("", "calculator", map[string]any{"expression": "1+2"})
	s.run("", "bash", map[string]any{"command": "echo hi"})
	// The API serves no /metrics: the metrics listener does.
	if resp, _ := s.do("GET", "/metrics", "", nil, nil); resp.StatusCode != 404 {
		t.Errorf("GET /metrics on the API: %d, want 404", resp.StatusCode)
	}
	body := s.getMetrics()
	text := string(body)
	for _, want := range []string{
		`sandboxd_jobs_total{`,
		`tool="calculator"`,
		`sandboxd_job_duration_seconds_bucket{`,
		`sandboxd_effects_spent_total{effect="exec",tenant="default",tool="bash"} 1`,
		`sandboxd_queue_depth `,
		`sandboxd_sandboxes_alive `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not installed (scripts/setup.sh installs it)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestCLI(t *testing.T) {
	s := startServer(t, "")
	cli := func(args ...string) (string, string, int) {
		cmd := exec.Command(binPath, args...)
		cmd.Env = append(os.Environ(), "SANDBOXD_URL="+s.URL)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return stdout.String(), stderr.String(), code
	}
	out, errOut, code := cli("run", "python_repl", "--code", "print(1)")
	if code != 0 || strings.TrimSpace(out) != "1" {
		t.Fatalf("run print(1): code %d out %q err %q", code, out, errOut)
	}
	_, _, code = cli("run", "python_repl", "--code", "raise SystemExit(4)")
	if code == 0 {
		t.Fatal("a failing tool must give a non-zero exit status")
	}
	out, _, code = cli("run", "calculator", "--json", `{"expression": "7*6"}`)
	if code != 0 || strings.TrimSpace(out) != "42" {
		t.Fatalf("run calculator: %d %q", code, out)
	}
	out, _, code = cli("tools")
	if code != 0 || !strings.Contains(out, "python_repl") || !strings.Contains(out, "http_request") {
		t.Fatalf("tools: %d %q", code, out)
	}
	_, _, code = cli("run", "python_repl", "--code", "1", "--url", "http://127.0.0.1:1")
	if code == 0 {
		t.Fatal("an unreachable server must give a non-zero exit status")
	}
}
