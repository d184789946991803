//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
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
// it) does the same with every sandbox under runsc; the replicas one
// (docker-compose.replicas.yml) runs three replicas on one Postgres.
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
	t.Run("default", func(t *testing.T) { composeSingle(t, dc, root, "", "docker-compose.yml") })
	t.Run("gvisor", func(t *testing.T) { // runsc: scripts/gvisor-setup.sh
		composeSingle(t, dc, root, "runsc", "docker-compose.yml", "docker-compose.gvisor.yml")
	})
	t.Run("replicas", func(t *testing.T) {
		composeReplicas(t, dc, root, "docker-compose.yml", "docker-compose.replicas.yml")
	})
}

// composeProject is one docker-compose project of a test's own: its own
// project name, data dirs and (through env) ports. Its cleanup runs
// `down -v`, removes whatever of it is left, checks that none of the
// sandboxes of the sandboxd containers it was asked about (sandboxd) is
// left, and unmounts and removes the data dirs.
type composeProject struct {
	t        *testing.T
	dc, root string
	name     string
	files    []string
	env      []string
	// dataDirs are SANDBOXD_COMPOSE_DATA and, for replicas 2..N, the
	// same path with -2, -3, ... (build.sh's and the compose files').
	dataDirs []string
	// pids are the host pids of the project's sandboxd containers, by
	// service, whose sandboxes must be gone after down.
	pids map[string]string
}

// startCompose builds the images with deploy/build.sh (replicas > 1:
// SANDBOXD_COMPOSE_REPLICAS, the postgres image and the replicas' data
// dirs too) and brings the compose files up under a project of its own,
// with env (ports, keys, secrets) added to the environment.
func startCompose(t *testing.T, dc, root string, replicas int, env []string, files ...string) *composeProject {
	// A short data dir of its own (the runner's sockets live under it);
	// build.sh makes it (and the replicas') a shared mount, which is
	// undone at the end.
	data, err := os.MkdirTemp("/var/tmp", "sbxc")
	if err != nil {
		t.Fatal(err)
	}
	c := &composeProject{t: t, dc: dc, root: root, name: ids.Short("sbxcompose"), files: files,
		dataDirs: []string{data}, pids: map[string]string{}}
	for i := 2; i <= replicas; i++ {
		c.dataDirs = append(c.dataDirs, fmt.Sprintf("%s-%d", data, i))
	}
	c.env = append(append(os.Environ(),
		"COMPOSE_PROJECT_NAME="+c.name,
		"SANDBOXD_COMPOSE_DATA="+data,
		fmt.Sprintf("SANDBOXD_COMPOSE_REPLICAS=%d", replicas),
	), env...)
	t.Cleanup(func() {
		for _, d := range c.dataDirs {
			exec.Command("umount", "-l", d).Run() // build.sh's bind mount, if it made one
			os.RemoveAll(d)
		}
	})

	// build.sh's go builds share the cache with TestMain's (same flags).
	if out, err := c.command(15*time.Minute, "bash", "deploy/build.sh"); err != nil {
		t.Fatalf("deploy/build.sh: %v\n%s", err, out)
	}
	if out, err := c.compose(time.Minute, "config", "-q"); err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	t.Cleanup(c.down)
	start := time.Now()
	if out, err := c.compose(5*time.Minute, "up", "-d", "--no-build"); err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, out)
	}
	t.Logf("docker-compose up: %v", time.Since(start).Round(time.Second))
	if out, err := c.compose(time.Minute, "ps"); err == nil {
		t.Logf("docker-compose ps:\n%s", out)
	}
	if ids := c.containers("grafana"); len(ids) != 0 {
		t.Errorf("grafana started without its profile: %v", ids)
	}
	return c
}

// command runs name in the repository's root with the project's env.
func (c *composeProject) command(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = c.root, c.env
	// At the timeout the whole group goes (build.sh's go build and
	// docker build too), and Wait does not wait for their pipes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd.CombinedOutput()
}

// compose runs docker-compose on the project's files.
func (c *composeProject) compose(timeout time.Duration, args ...string) ([]byte, error) {
	pre := []string{"-p", c.name}
	for _, f := range c.files {
		pre = append(pre, "-f", f)
	}
	return c.command(timeout, c.dc, append(pre, args...)...)
}

// logs is the tail of every service's log, for a failure's message.
func (c *composeProject) logs() string {
	out, _ := c.compose(time.Minute, "logs", "--no-color", "--tail", "60")
	return string(out)
}

// containers lists the project's containers of service.
func (c *composeProject) containers(service string) []string {
	return dockerIDs(c.t, "label=com.docker.compose.project="+c.name, "label=com.docker.compose.service="+service)
}

// sandboxd is the container of the sandboxd service and its host pid,
// whose sandboxes the cleanup checks are gone after down.
func (c *composeProject) sandboxd(service string) (id, pid string) {
	c.t.Helper()
	cid := c.containers(service)
	if len(cid) != 1 {
		c.t.Fatalf("%s containers of the project: %v", service, cid)
	}
	out, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", cid[0]).Output()
	if err != nil {
		c.t.Fatal(err)
	}
	pid = strings.TrimSpace(string(out))
	c.pids[service] = pid
	return cid[0], pid
}

// down runs `down -v`; none of the project's containers and none of the
// sandboxes of its sandboxd containers may be left.
func (c *composeProject) down() {
	t := c.t
	start := time.Now()
	if out, err := c.compose(2*time.Minute, "down", "-v", "--timeout", "30"); err != nil {
		t.Errorf("docker-compose down: %v\n%s", err, out)
	}
	t.Logf("docker-compose down: %v", time.Since(start).Round(time.Second))
	// Whatever is left of this project (a failed down) goes too.
	for _, id := range dockerIDs(t, "label=com.docker.compose.project="+c.name) {
		exec.Command("docker", "rm", "-f", id).Run()
	}
	// sandboxd closes its sandboxes when it stops: none of its own
	// (owner-proc pid:starttime of its host pid) may be left.
	for service, pid := range c.pids {
		left := sandboxesOf(t, pid)
		for _, id := range left {
			exec.Command("docker", "rm", "-f", id).Run()
		}
		if len(left) > 0 {
			t.Errorf("after down, %d sandboxes of the compose %s (pid %s) were left: %v", len(left), service, pid, left)
		}
	}
}

// waitHealthy waits for GET base/healthz to answer 200.
func (c *composeProject) waitHealthy(what, base string) {
	c.t.Helper()
	waitFor(c.t, 3*time.Minute, c.logs, what+"'s /healthz", func() error {
		return httpOK(base+"/healthz", "")
	})
}

// waitProm waits for Prometheus at prom to answer query with a single
// value, want.
func (c *composeProject) waitProm(prom, what, query, want string) {
	c.t.Helper()
	waitFor(c.t, 2*time.Minute, c.logs, what, func() error {
		resp, err := http.Get(prom + "/api/v1/query?query=" + url.QueryEscape(query))
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
		if len(r.Data.Result) != 1 || r.Data.Result[0].Value[1] != want {
			return fmt.Errorf("not yet (want %s): %s", want, b)
		}
		c.t.Logf("Prometheus: %s", b)
		return nil
	})
}

// composeSingle runs the compose files' one sandboxd; every sandbox must
// run under runtime ("": the daemon's default).
func composeSingle(t *testing.T, dc, root, runtime string, files ...string) {
	sdPort, promPort := port(t), port(t)
	const key = "key-compose"
	c := startCompose(t, dc, root, 1, []string{
		"SANDBOXD_PORT=" + sdPort,
		"PROMETHEUS_PORT=" + promPort,
		"SANDBOXD_API_KEYS=" + key + ":compose",
	}, files...)
	sd := &server{t: t, URL: "http://127.0.0.1:" + sdPort}
	c.waitHealthy("sandboxd", sd.URL)
	cid, sandboxdPid := c.sandboxd("sandboxd")

	// The API answers with a key, and a job runs in a Docker sandbox that
	// the containerised sandboxd asked the host's dockerd for (its
	// workspace a loop-mounted filesystem under the shared data dir).
	var j jobView
	resp, body := sd.do("POST", "/v1/jobs?wait=true", key, map[string]any{"tool": "python_repl", "arguments": map[string]any{
		"code": "import os\nopen('/workspace/x', 'w').write('hi')\nprint(os.getuid(), open('/workspace/x').read())"}}, &j)
	if j.State != "succeeded" || j.Result == nil || !strings.Contains(j.Result.Content, "65534 hi") {
		t.Fatalf("job through the compose sandboxd: %d %s\n%s", resp.StatusCode, body, c.logs())
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
	if err := httpOK(sd.URL+"/v1/tools", ""); err == nil {
		t.Error("GET /v1/tools without a key answered 200")
	}

	// Prometheus scrapes sandboxd's metrics listener over the compose
	// network (the port is not published on the host) and sees the job:
	// 1 once the target is up and a succeeded job was scraped.
	c.waitProm("http://127.0.0.1:"+promPort, "Prometheus sees sandboxd up and its job",
		`max(up{job="sandboxd"}) * clamp_max(sum(sandboxd_jobs_total{outcome="ok"}), 1)`, "1")
	if out, err := exec.Command("docker", "port", cid).Output(); err != nil || strings.Contains(string(out), "9464") || !strings.Contains(string(out), sdPort) {
		t.Errorf("sandboxd's published ports (only the API's): %v %s", err, out)
	}
}

// composeReplicas runs docker-compose.replicas.yml's three replicas on one
// Postgres: each answers on its own port and runs a job, a job submitted
// to one is read through another (one store), a session created through
// replica 1 keeps its Python state when called through replica 2 (the
// request forwarded over the compose network, signed with the shared
// secret), and Prometheus scrapes all three.
func composeReplicas(t *testing.T, dc, root string, files ...string) {
	start := time.Now()
	services := []string{"sandboxd", "sandboxd-2", "sandboxd-3"}
	ports := []string{port(t), port(t), port(t)}
	promPort := port(t)
	secret := make([]byte, 32)
	pgPassword := make([]byte, 16)
	rand.Read(secret)
	rand.Read(pgPassword)
	const key = "key-compose"
	c := startCompose(t, dc, root, len(services), []string{
		"SANDBOXD_PORT=" + ports[0],
		"SANDBOXD_PORT_2=" + ports[1],
		"SANDBOXD_PORT_3=" + ports[2],
		"PROMETHEUS_PORT=" + promPort,
		"SANDBOXD_API_KEYS=" + key + ":compose",
		"SANDBOXD_PG_PASSWORD=" + base64.RawURLEncoding.EncodeToString(pgPassword),
		"SANDBOXD_REPLICA_SECRET=" + base64.StdEncoding.EncodeToString(secret),
	}, files...)
	var rs []*server
	for i, service := range services {
		r := &server{t: t, URL: "http://127.0.0.1:" + ports[i]}
		c.waitHealthy(service, r.URL)
		cid, _ := c.sandboxd(service)
		if out, err := exec.Command("docker", "port", cid).Output(); err != nil || strings.Contains(string(out), "9464") || !strings.Contains(string(out), ports[i]) {
			t.Errorf("%s's published ports (only the API's, on %s): %v %s", service, ports[i], err, out)
		}
		rs = append(rs, r)
	}
	// Each replica's own healthcheck (the container's, as docker-compose
	// ps shows it) passes too, and none was restarted (a replica that
	// started before Postgres accepted connections and exited).
	waitFor(t, time.Minute, c.logs, "the replicas' container healthchecks", func() error {
		for _, service := range services {
			cid, _ := c.sandboxd(service)
			out, err := exec.Command("docker", "inspect", "-f", "{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.RestartCount}}", cid).Output()
			if err != nil {
				return err
			}
			health, restarts, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
			if restarts != "0" {
				t.Fatalf("%s was restarted %s times\n%s", service, restarts, c.logs())
			}
			if health != "healthy" {
				return fmt.Errorf("%s: health %s", service, health)
			}
		}
		return nil
	})
	if ids := c.containers("postgres"); len(ids) != 1 {
		t.Errorf("postgres containers of the project: %v", ids)
	} else if out, err := exec.Command("docker", "port", ids[0]).Output(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("postgres's published ports (none): %v %q", err, out)
	}
	t.Logf("three replicas healthy %v after the start", time.Since(start).Round(time.Second))

	// A job through each replica; the one through replica 2 is read
	// through replica 3 (the store they share).
	jobs := make([]jobView, len(rs))
	for i, r := range rs {
		expr := fmt.Sprintf("6 * 7 + %d", i)
		resp, body := r.do("POST", "/v1/jobs?wait=true", key, map[string]any{"tool": "calculator", "arguments": map[string]any{"expression": expr}}, &jobs[i])
		if jobs[i].State != "succeeded" || jobs[i].Result == nil || !strings.Contains(jobs[i].Result.Content, fmt.Sprint(42+i)) {
			t.Fatalf("%s through %s: %d %s\n%s", expr, services[i], resp.StatusCode, body, c.logs())
		}
	}
	var read jobView
	if resp, body := rs[2].do("GET", "/v1/jobs/"+jobs[1].ID, key, nil, &read); resp.StatusCode != 200 || read.ID != jobs[1].ID ||
		read.State != "succeeded" || read.Result == nil || read.Result.Content != jobs[1].Result.Content {
		t.Fatalf("%s's job through %s: %d %s", services[1], services[2], resp.StatusCode, body)
	}

	// A session created through replica 1 lives there; replica 2 forwards
	// its calls over the compose network.
	var sess sessionView
	if resp, body := rs[0].do("POST", "/v1/sessions", key, map[string]any{"ttl_seconds": 600}, &sess); resp.StatusCode != 201 {
		t.Fatalf("create a session through %s: %d %s\n%s", services[0], resp.StatusCode, body, c.logs())
	}
	repl := func(r int, code string) jobView {
		t.Helper()
		var j jobView
		resp, body := rs[r].do("POST", "/v1/jobs?wait=true", key, map[string]any{"tool": "python_repl",
			"arguments": map[string]any{"code": code}, "session_id": sess.ID}, &j)
		if resp.StatusCode != 200 || j.State != "succeeded" || j.Result == nil {
			t.Fatalf("%s in the session through %s: %d %s\n%s", code, services[r], resp.StatusCode, body, c.logs())
		}
		return j
	}
	repl(0, "x = 41")
	if j := repl(1, "x + 1"); !strings.Contains(j.Result.Content, "42") {
		t.Fatalf("x + 1 through %s in %s's session: %q", services[1], services[0], j.Result.Content)
	}
	if resp, body := rs[1].do("DELETE", "/v1/sessions/"+sess.ID, key, nil, nil); resp.StatusCode/100 != 2 {
		t.Fatalf("close the session through %s: %d %s", services[1], resp.StatusCode, body)
	}
	var closed sessionView
	if resp, body := rs[0].do("GET", "/v1/sessions/"+sess.ID, key, nil, &closed); resp.StatusCode != 200 || closed.State != "closed" {
		t.Fatalf("the session after its close: %d %s", resp.StatusCode, body)
	}

	// Each replica runs sandboxes of its own (its pool, its jobs, replica
	// 1 the session's), which down must leave none of.
	for _, service := range services {
		if pid := c.pids[service]; len(sandboxesOf(t, pid)) == 0 {
			t.Errorf("no sandbox container is labelled with %s's owner-proc (pid %s)", service, pid)
		}
	}

	// Prometheus scrapes each replica's metrics listener over the compose
	// network.
	c.waitProm("http://127.0.0.1:"+promPort, "Prometheus sees the three replicas up",
		`count(up{job="sandboxd"} == 1)`, "3")
	t.Logf("replicas checked %v after the start", time.Since(start).Round(time.Second))
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
