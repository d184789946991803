//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/ids"
)

// TestComposeUp runs the repository's docker-compose.yml with Debian's
// docker-compose (1.29): deploy/build.sh builds the sandboxd and Prometheus
// images here (FROM the local Debian images, no registry), `up` starts
// both, sandboxd runs a job in a Docker sandbox from inside its container
// and Prometheus scrapes it over the compose network; `down` of this
// test's own project (a project name of its own, its own data dir and
// ports) leaves none of its containers and none of its sandboxes behind.
// Grafana is in a profile of its own (its image cannot be fetched here)
// and is not started. The gVisor variant (docker-compose.gvisor.yml beside
// it) does the same with every sandbox under runsc.
func TestComposeUp(t *testing.T) {
	needDocker(t)
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatal("docker-compose not installed (scripts/setup.sh installs Debian's)")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("default", func(t *testing.T) { composeUp(t, dc, root, "", "docker-compose.yml") })
	t.Run("gvisor", func(t *testing.T) { // runsc: scripts/gvisor-setup.sh
		composeUp(t, dc, root, "runsc", "docker-compose.yml", "docker-compose.gvisor.yml")
	})
}

// composeUp runs the compose files under a project of its own; every
// sandbox must run under runtime ("": the daemon's default).
func composeUp(t *testing.T, dc, root, runtime string, files ...string) {
	// A short data dir of its own (the runner's sockets live under it);
	// build.sh makes it a shared mount, which is undone at the end.
	data, err := os.MkdirTemp("/var/tmp", "sbxc")
	if err != nil {
		t.Fatal(err)
	}
	project := ids.Short("sbxcompose")
	sdPort, promPort := port(t), port(t)
	env := append(os.Environ(),
		"COMPOSE_PROJECT_NAME="+project,
		"SANDBOXD_COMPOSE_DATA="+data,
		"SANDBOXD_PORT="+sdPort,
		"PROMETHEUS_PORT="+promPort,
		"SANDBOXD_API_KEYS=key-compose:compose",
	)
	command := func(timeout time.Duration, name string, args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = root, env
		// At the timeout the whole group goes (build.sh's go build and
		// docker build too), and Wait does not wait for their pipes.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		return cmd.CombinedOutput()
	}
	compose := func(timeout time.Duration, args ...string) ([]byte, error) {
		pre := []string{"-p", project}
		for _, f := range files {
			pre = append(pre, "-f", f)
		}
		return command(timeout, dc, append(pre, args...)...)
	}
	t.Cleanup(func() {
		exec.Command("umount", "-l", data).Run() // build.sh's bind mount, if it made one
		os.RemoveAll(data)
	})

	// build.sh's go builds share the cache with TestMain's (same flags).
	if out, err := command(15*time.Minute, "bash", "deploy/build.sh"); err != nil {
		t.Fatalf("deploy/build.sh: %v\n%s", err, out)
	}
	if out, err := compose(time.Minute, "config", "-q"); err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var sandboxdPid string
	t.Cleanup(func() {
		if out, err := compose(2*time.Minute, "down", "-v", "--timeout", "30"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, out)
		}
		// Whatever is left of this project (a failed down) goes too.
		for _, id := range dockerIDs(t, "label=com.docker.compose.project="+project) {
			exec.Command("docker", "rm", "-f", id).Run()
		}
		if sandboxdPid == "" {
			return
		}
		// sandboxd closes its sandboxes when it stops: none of its own
		// (owner-proc pid:starttime of its host pid) may be left.
		left := sandboxesOf(t, sandboxdPid)
		for _, id := range left {
			exec.Command("docker", "rm", "-f", id).Run()
		}
		if len(left) > 0 {
			t.Errorf("after down, %d sandboxes of the compose sandboxd (pid %s) were left: %v", len(left), sandboxdPid, left)
		}
	})
	if out, err := compose(5*time.Minute, "up", "-d", "--no-build"); err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, out)
	}
	if out, err := compose(time.Minute, "ps"); err == nil {
		t.Logf("docker-compose ps:\n%s", out)
	}
	if ids := dockerIDs(t, "label=com.docker.compose.project="+project, "label=com.docker.compose.service=grafana"); len(ids) != 0 {
		t.Errorf("grafana started without its profile: %v", ids)
	}

	base := "http://127.0.0.1:" + sdPort
	logs := func() string {
		out, _ := compose(time.Minute, "logs", "--no-color", "--tail", "60")
		return string(out)
	}
	waitFor(t, 3*time.Minute, logs, "sandboxd's /healthz", func() error {
		return httpOK(base+"/healthz", "")
	})
	cid := dockerIDs(t, "label=com.docker.compose.project="+project, "label=com.docker.compose.service=sandboxd")
	if len(cid) != 1 {
		t.Fatalf("sandboxd containers of the project: %v", cid)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", cid[0]).Output()
	if err != nil {
		t.Fatal(err)
	}
	sandboxdPid = strings.TrimSpace(string(out))

	// The API answers with a key, and a job runs in a Docker sandbox that
	// the containerised sandboxd asked the host's dockerd for (its
	// workspace a loop-mounted filesystem under the shared data dir).
	req, _ := http.NewRequest("POST", base+"/v1/jobs?wait=true", strings.NewReader(`{"tool":"python_repl","arguments":{"code":"import os\nopen('/workspace/x', 'w').write('hi')\nprint(os.getuid(), open('/workspace/x').read())"}}`))
	req.Header.Set("Authorization", "Bearer key-compose")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("job: %v\n%s", err, logs())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var j struct {
		State  string `json:"state"`
		Result struct {
			OK      bool   `json:"ok"`
			Content string `json:"content"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &j); err != nil || j.State != "succeeded" || !strings.Contains(j.Result.Content, "65534 hi") {
		t.Fatalf("job through the compose sandboxd: %d %s\n%s", resp.StatusCode, body, logs())
	}
	t.Logf("job in a Docker sandbox of the compose sandboxd: %q", j.Result.Content)
	sbs := sandboxesOf(t, sandboxdPid)
	if len(sbs) == 0 {
		t.Errorf("no sandbox container is labelled with the compose sandboxd's owner-proc (pid %s)", sandboxdPid)
	}
	inspected := 0
	for _, id := range sbs {
		out, err := exec.Command("docker", "inspect", "-f", "{{.HostConfig.Runtime}}", id).Output()
		if err != nil { // the job's sandbox, removed since the listing
			continue
		}
		inspected++
		if got := strings.TrimSpace(string(out)); runtime != "" && got != runtime {
			t.Errorf("sandbox %.12s runs under %q, want %q", id, got, runtime)
		}
	}
	if inspected == 0 {
		t.Errorf("none of the sandboxes %v could be inspected", sbs)
	}
	t.Logf("%d sandbox containers owned by the compose sandboxd (host pid %s), runtime %q", len(sbs), sandboxdPid, runtime)
	if err := httpOK(base+"/v1/tools", ""); err == nil {
		t.Error("GET /v1/tools without a key answered 200")
	}

	// Prometheus scrapes sandboxd's metrics listener over the compose
	// network (the port is not published on the host) and sees the job.
	prom := "http://127.0.0.1:" + promPort
	waitFor(t, 2*time.Minute, logs, "Prometheus sees sandboxd up and its job", func() error {
		// 1 once the target is up and a succeeded job was scraped.
		q := url.QueryEscape(`max(up{job="sandboxd"}) * clamp_max(sum(sandboxd_jobs_total{outcome="ok"}), 1)`)
		resp, err := http.Get(prom + "/api/v1/query?query=" + q)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &r); err != nil || r.Status != "success" {
			return fmt.Errorf("query: %d %s", resp.StatusCode, b)
		}
		if len(r.Data.Result) != 1 || r.Data.Result[0].Value[1] != "1" {
			return fmt.Errorf("not yet: %s", b)
		}
		t.Logf("Prometheus: %s", b)
		return nil
	})
	if out, err := exec.Command("docker", "port", cid[0]).Output(); err != nil || strings.Contains(string(out), "9464") || !strings.Contains(string(out), sdPort) {
		t.Errorf("sandboxd's published ports (only the API's): %v %s", err, out)
	}
}

// port is a free TCP port on the loopback.
func port(t *testing.T) string {
	_, p, _ := net.SplitHostPort(freeAddr(t))
	return p
}

// httpOK is nil when GET url answers 200.
func httpOK(u, key string) error {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// waitFor retries check until it is nil, failing with the last error and
// logs() after timeout.
func waitFor(t *testing.T, timeout time.Duration, logs func() string, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v\n%s", what, err, logs())
		}
		time.Sleep(time.Second)
	}
}

// dockerIDs lists the containers (all states) matching every filter.
func dockerIDs(t *testing.T, filters ...string) []string {
	args := []string{"ps", "-a", "-q", "--no-trunc"}
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	out, err := exec.Command("docker", args...).Output()
	if err != nil {
		t.Errorf("docker ps: %v", err)
		return nil
	}
	return strings.Fields(string(out))
}

// sandboxesOf lists the sandbox containers whose owner-proc label names
// host pid (any start time).
func sandboxesOf(t *testing.T, pid string) []string {
	out, err := exec.Command("docker", "ps", "-a", "--no-trunc", "--filter", "label=sandboxd.owner-proc",
		"--format", `{{.ID}} {{.Label "sandboxd.owner-proc"}}`).Output()
	if err != nil {
		t.Errorf("docker ps: %v", err)
		return nil
	}
	var found []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		id, proc, _ := strings.Cut(line, " ")
		if strings.HasPrefix(proc, pid+":") {
			found = append(found, id)
		}
	}
	return found
}
