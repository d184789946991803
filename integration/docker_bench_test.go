//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkDockerPython compares, side by side in one run:
//
//	docker-run:      docker run --rm --network none sandboxd/python python3 -c 'print(1)'
//	docker-exec:     docker exec into a running container, same command
//	api-oneshot:     python_repl {"code":"print(1)"} through the HTTP API,
//	                 Docker runner, a fresh sandbox from the warm pool. Calls
//	                 are paced like an agent loop (the model thinks between
//	                 calls): before each one, untimed, the bench waits until
//	                 the pool has a ready sandbox again. Back to back, calls
//	                 outrun container creation (~200 ms) and the pool drains;
//	                 api-oneshot-drained shows that case.
//	api-session:     the same call in a warm session (persistent REPL)
func BenchmarkDockerPython(b *testing.B) {
	needDocker(b)
	py := []string{"python3", "-c", "print(1)"}
	b.Run("docker-run", func(b *testing.B) {
		args := append([]string{"run", "--rm", "--network", "none", "sandboxd/python:latest"}, py...)
		measure(b, func() error { return dockerCLI(args...) })
	})
	b.Run("docker-exec", func(b *testing.B) {
		out, err := exec.Command("docker", "run", "-d", "--rm", "--network", "none", "sandboxd/python:latest", "sleep", "infinity").Output()
		if err != nil {
			b.Fatal(err)
		}
		id := strings.TrimSpace(string(out))
		defer exec.Command("docker", "rm", "-f", id).Run()
		args := append([]string{"exec", id}, py...)
		measure(b, func() error { return dockerCLI(args...) })
	})

	s := startServer(b, dockerConfig(""))
	client := &http.Client{}
	oneshot := func() error { return apiCall(client, s.URL, "python_repl", map[string]any{"code": "print(1)"}) }
	b.Run("api-oneshot", func(b *testing.B) {
		measurePaced(b, func() error { return waitPoolReady(s.MetricsURL, 2) }, oneshot)
	})
	b.Run("api-oneshot-drained", func(b *testing.B) { measure(b, oneshot) })
	b.Run("api-session", func(b *testing.B) {
		id, err := createSession(context.Background(), s.URL)
		if err != nil {
			b.Fatal(err)
		}
		defer deleteSession(s.URL, id)
		measure(b, func() error { return sessionCall(context.Background(), client, s.URL, id, "print(1)") })
	})
}

// waitPoolReady waits until the pool (base: the metrics listener) holds at least n ready sandboxes.
func waitPoolReady(base string, n int) error {
	return waitMetric(base, "sandboxd_pool_ready{", func(v float64) bool { return v >= float64(n) })
}

// waitMetric polls base's /metrics until a sample line starting with
// prefix has a value ok accepts (30 s at most).
func waitMetric(base, prefix string, ok func(float64) bool) error {
	last := "none"
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, prefix) {
				f := strings.Fields(line)
				last = f[len(f)-1]
				if v, err := strconv.ParseFloat(last, 64); err == nil && ok(v) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("metric %s never reached the value waited for (last %s)", prefix, last)
}

func dockerCLI(args ...string) error {
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err == nil && strings.TrimSpace(string(out)) != "1" {
		err = fmt.Errorf("docker %v: %q", args, out)
	}
	return err
}

func createSession(ctx context.Context, base string) (string, error) {
	body, _ := json.Marshal(map[string]any{"effects": []string{"exec", "file_read", "file_write"}})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/sessions", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var ses struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ses); err != nil || resp.StatusCode != 201 {
		return "", fmt.Errorf("create session: status %d, %v", resp.StatusCode, err)
	}
	return ses.ID, nil
}

func deleteSession(base, id string) {
	req, _ := http.NewRequest("DELETE", base+"/v1/sessions/"+id, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

func sessionCall(ctx context.Context, c *http.Client, base, session, code string) error {
	body, _ := json.Marshal(map[string]any{"tool": "python_repl", "arguments": map[string]any{"code": code}, "session_id": session})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/jobs?wait=true", bytes.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var j jobView
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return err
	}
	if resp.StatusCode != 200 || j.Result == nil || !j.Result.OK {
		return fmt.Errorf("session call: status %d job %+v", resp.StatusCode, j)
	}
	return nil
}

// BenchmarkRuntimes is BenchmarkDockerPython's API columns for every
// container runner and runtime, side by side in one run: Docker and
// containerd, each under runc and under gVisor (runsc), with the raw
// daemon CLIs as baselines. Each server runs only while its columns are
// measured (a warm pool refilling in the background would slow the
// others).
//
//	<runner>-<runtime>/api-oneshot   python_repl print(1), pooled sandbox, paced
//	<runner>-<runtime>/api-session   the same call in a warm session (REPL)
//	ctr-run, ctr-exec                containerd's CLI: a fresh task, an exec
func BenchmarkRuntimes(b *testing.B) {
	needDocker(b)
	const image = "docker.io/sandboxd/python:latest"
	ctr := func(args ...string) error {
		out, err := exec.Command("ctr", append([]string{"-n", "sandboxd"}, args...)...).CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) != "1" {
			err = fmt.Errorf("ctr %v: %q", args, out)
		}
		return err
	}
	if err := exec.Command("ctr", "-n", "sandboxd", "images", "check", "name=="+image).Run(); err != nil {
		b.Fatalf("containerd lacks %s (scripts/containerd-setup.sh imports it): %v", image, err)
	}
	b.Run("ctr-run", func(b *testing.B) {
		n := 0
		measure(b, func() error {
			n++
			return ctr("run", "--rm", image, fmt.Sprintf("bench-run-%d-%d", time.Now().UnixNano(), n), "python3", "-c", "print(1)")
		})
	})
	b.Run("ctr-exec", func(b *testing.B) {
		name := fmt.Sprintf("bench-exec-%d", time.Now().UnixNano())
		if out, err := exec.Command("ctr", "-n", "sandboxd", "run", "-d", image, name, "sleep", "infinity").CombinedOutput(); err != nil {
			b.Fatalf("ctr run -d: %v %s", err, out)
		}
		defer func() {
			exec.Command("ctr", "-n", "sandboxd", "task", "kill", "-s", "SIGKILL", name).Run()
			time.Sleep(200 * time.Millisecond)
			exec.Command("ctr", "-n", "sandboxd", "task", "rm", "-f", name).Run()
			exec.Command("ctr", "-n", "sandboxd", "container", "rm", name).Run()
		}()
		n := 0
		measure(b, func() error {
			n++
			return ctr("task", "exec", "--exec-id", fmt.Sprintf("e%d", n), name, "python3", "-c", "print(1)")
		})
	})
	for _, rt := range []struct{ runner, runtime string }{
		{"docker", ""}, {"docker", "runsc"}, {"containerd", ""}, {"containerd", "runsc"},
	} {
		name := rt.runner + "-" + rt.runtime
		if rt.runtime == "" {
			name += "runc"
		}
		b.Run(name, func(b *testing.B) {
			s := startServer(b, runtimePoolConfig(rt.runner, rt.runtime, 2))
			defer s.stop(syscall.SIGTERM)
			client := &http.Client{}
			b.Run("api-oneshot", func(b *testing.B) {
				measurePaced(b, func() error { return waitPoolReady(s.MetricsURL, 2) },
					func() error { return apiCall(client, s.URL, "python_repl", map[string]any{"code": "print(1)"}) })
			})
			b.Run("api-session", func(b *testing.B) {
				id, err := createSession(context.Background(), s.URL)
				if err != nil {
					b.Fatal(err)
				}
				defer deleteSession(s.URL, id)
				// Measure the steady state: the pool refilled after the
				// one-shot calls and the session, and the used sandboxes
				// gone (a runsc container takes ~0.4 s of CPU to create).
				if err := waitMetric(s.MetricsURL, "sandboxd_sandboxes_alive ", func(v float64) bool { return v == 3 }); err != nil {
					b.Fatal(err)
				}
				if err := waitPoolReady(s.MetricsURL, 2); err != nil {
					b.Fatal(err)
				}
				measure(b, func() error { return sessionCall(context.Background(), client, s.URL, id, "print(1)") })
			})
		})
	}
}
