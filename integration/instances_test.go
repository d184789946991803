//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInstanceDataDirLocked: a second `sandboxd serve` on a live server's
// data dir (another port) exits at once, non-zero, naming the holder's pid,
// and touches nothing: the first server's running job finishes, its session
// and the session's workspace are intact.
func TestInstanceDataDirLocked(t *testing.T) {
	s := startServer(t, "")
	var sess sessionView
	if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{}, &sess); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "echo kept > note.txt"}); j.State != "succeeded" {
		t.Fatalf("bash in session: %+v", j.Result)
	}
	running := s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 3; echo finished"}})
	s.waitState(running, "running", 20*time.Second)

	out, code := s.second(20 * time.Second)
	pid := strconv.Itoa(s.cmd.Process.Pid)
	if code == 0 || !strings.Contains(out, "pid "+pid) {
		t.Fatalf("second sandboxd on the same data dir: exit %d, want non-zero naming pid %s; output:\n%s", code, pid, out)
	}

	if j := s.waitTerminal(running, 30*time.Second); j.State != "succeeded" || !strings.Contains(j.Result.Content, "finished") {
		t.Fatalf("the first server's running job: %s/%s %+v", j.State, j.Reason, j.Result)
	}
	s.do("GET", "/v1/sessions/"+sess.ID, "", nil, &sess)
	if sess.State != "active" {
		t.Fatalf("the first server's session after the second start: %+v", sess)
	}
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "cat note.txt"}); j.State != "succeeded" || !strings.Contains(j.Result.Content, "kept") {
		t.Fatalf("the session's workspace after the second start: %+v", j.Result)
	}
}

// second runs another `sandboxd serve` on s's data dir and config, on
// another port, and returns its output and exit code; one that is still
// running after d is killed (code -1).
func (s *server) second(d time.Duration) (string, int) {
	s.t.Helper()
	args := []string{"serve", "--addr", freeAddr(s.t), "--data-dir", s.DataDir}
	if s.Config != "" {
		args = append(args, "--config", s.Config)
	}
	args = append(args, s.Args...)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String() + fmt.Sprintf("\n(still running after %v: killed)", d), -1
	}
	if err != nil && cmd.ProcessState == nil {
		s.t.Fatal(err)
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// workspaceDirs lists the job, pool and session workspaces under s's data
// dir.
func (s *server) workspaceDirs() []string {
	s.t.Helper()
	var dirs []string
	root := filepath.Join(s.DataDir, "workspaces")
	for _, pattern := range []string{"job_*", "pool/*", "sessions/*"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			s.t.Fatal(err)
		}
		dirs = append(dirs, m...)
	}
	return dirs
}

// TestInstanceWorkspacesAfterKillRounds: a few rounds of kill -9 with
// jobs running and a session open; after each restart every workspace
// belongs to a live job or session of the new process (ten rounds left 203
// directories before: lost jobs' workspaces were never removed).
func TestInstanceWorkspacesAfterKillRounds(t *testing.T) {
	s := startServer(t, "queue:\n  workers: 2\n")
	for round := 0; round < 3; round++ {
		var sess sessionView
		if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{}, &sess); resp.StatusCode != 201 {
			t.Fatalf("round %d: create session: %d %s", round, resp.StatusCode, data)
		}
		if j := s.runIn(sess.ID, "bash", map[string]any{"command": "head -c 100000 /dev/zero > big"}); j.State != "succeeded" {
			t.Fatalf("round %d: bash in session: %+v", round, j.Result)
		}
		var running []string
		for i := 0; i < 2; i++ {
			id := s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": "echo x > out; sleep 600"}})
			running = append(running, id)
		}
		for _, id := range running {
			s.waitState(id, "running", 20*time.Second)
		}
		before := s.workspaceDirs()
		if n := len(before); n < 3 {
			t.Fatalf("round %d: %d workspaces before the crash, want the session's and two jobs'", round, n)
		}
		s.stop(syscall.SIGKILL)
		s.start()
		// The new process has no job or session yet; its pool makes
		// workspaces of its own (new ids, under pool/). None of the old
		// process's may be left.
		var left []string
		for _, d := range s.workspaceDirs() {
			if slices.Contains(before, d) || !strings.HasPrefix(d, filepath.Join(s.DataDir, "workspaces", "pool")+"/") {
				left = append(left, d)
			}
		}
		if len(left) != 0 {
			t.Fatalf("round %d: %d workspaces of the previous process left after the restart: %v", round, len(left), left)
		}
		for _, id := range running {
			if j := s.get(id); j.State != "failed" || j.Reason != "lost" {
				t.Fatalf("round %d: job %s after the crash: %s/%s", round, id, j.State, j.Reason)
			}
		}
	}
}

// TestInstanceCleanupRetried: a session's workspace with a file made
// immutable from the host cannot be removed when the session closes; it is
// listed in /metrics and removed once the file can go.
func TestInstanceCleanupRetried(t *testing.T) {
	s := startServer(t, "")
	var sess sessionView
	// Limits no pooled profile has: the session's own workspace,
	// sessions/<id> (one that takes a pooled sandbox keeps that sandbox's,
	// pool/<id>, depending on whether the pool is ready).
	if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"limits": map[string]any{"disk_bytes": 48 << 20}}, &sess); resp.StatusCode != 201 {
		t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	if j := s.runIn(sess.ID, "bash", map[string]any{"command": "head -c 4096 /dev/zero > pinned"}); j.State != "succeeded" {
		t.Fatalf("bash: %+v", j.Result)
	}
	// The workspace is a filesystem of its own mounted on ws; what cannot
	// go when it is released is what lies below it, in the data dir: the
	// host pins a file there (seen through a bind of the parent, which
	// does not carry the workspace's mount) and makes it immutable.
	sessions := filepath.Join(s.DataDir, "workspaces", "sessions")
	ws := filepath.Join(sessions, sess.ID)
	pinned := filepath.Join(ws, "pinned")
	under := t.TempDir()
	if out, err := exec.Command("mount", "--bind", sessions, under).CombinedOutput(); err != nil {
		t.Fatalf("bind the sessions directory: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(under, sess.ID, "pinned"), make([]byte, 4096), 0o644); err != nil {
		exec.Command("umount", under).Run()
		t.Fatal(err)
	}
	out, err := exec.Command("chattr", "+i", filepath.Join(under, sess.ID, "pinned")).CombinedOutput()
	if uerr := exec.Command("umount", under).Run(); uerr != nil {
		t.Fatalf("umount %s: %v", under, uerr)
	}
	if err != nil {
		t.Fatalf("chattr +i: %v %s", err, out)
	}
	defer exec.Command("chattr", "-i", pinned).Run()
	if resp, _ := s.do("DELETE", "/v1/sessions/"+sess.ID, "", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("delete session: %d", resp.StatusCode)
	}
	if n, b := s.metric("sandboxd_cleanup_pending"), s.metric("sandboxd_cleanup_pending_bytes"); n != 1 || b != 4096 {
		t.Fatalf("pending cleanups %v (%v bytes), want 1 (4096)", n, b)
	}
	if err := exec.Command("chattr", "-i", pinned).Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.metric("sandboxd_cleanup_pending") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the failed cleanup was not retried")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Fatalf("workspace after the retry: %v", err)
	}
}

// instanceRunners are the runners TestInstancesSideBySide runs two
// servers of.
var instanceRunners = []struct {
	name   string
	config func() string
	args   []string
}{
	{"local", func() string { return "" }, nil},
	{"docker", func() string { return dockerConfig("pool:\n  size: 1\n") }, nil},
	{"containerd", func() string { return "pool:\n  size: 1\n" }, []string{"--runner", "containerd"}},
}

// TestInstancesSideBySide runs two sandboxd processes on one host (each
// its own data dir, one dockerd or containerd), each doing jobs and
// sessions while the other starts (and reaps), is killed with -9,
// restarts (and reaps what its dead self left) and stops. Neither ever
// fails a call, nor loses a session, a running job or a container; what
// a killed process left is gone once it restarted.
func TestInstancesSideBySide(t *testing.T) {
	for _, rc := range instanceRunners {
		t.Run(rc.name, func(t *testing.T) {
			if rc.name == "docker" {
				needDocker(t)
			}
			a := startServerArgs(t, rc.config(), rc.args...)
			b := startServerArgs(t, rc.config(), rc.args...)
			for _, pair := range []struct{ busy, other *server }{{a, b}, {b, a}} {
				busy, other := pair.busy, pair.other
				w := prepareWork(busy)
				sessionCtr := sessionContainer(t, rc.name, w.session)
				// The busy one idles a moment, its pool full: its state is
				// older than the other's next start (a docker runner used to
				// reap every other instance's state older than its own
				// start, alive or not).
				if rc.name != "local" {
					if err := waitMetric(busy.MetricsURL, "sandboxd_pool_ready{", func(v float64) bool { return v >= 1 }); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(1500 * time.Millisecond)
				// The other one is killed and starts again (reaping its dead
				// self's sandboxes); the busy one works while the other
				// runs a job and a session, stops and starts again.
				killed := other.cmd.Process.Pid
				otherBefore := containersOf(t, rc.name, killed)
				if rc.name != "local" && len(otherBefore) == 0 {
					t.Fatalf("%s: the other instance (pid %d) has no containers to leave behind", rc.name, killed)
				}
				other.stop(syscall.SIGKILL)
				other.start()
				w.run()
				otherSession(t, other)
				other.stop(syscall.SIGTERM)
				other.start()
				otherSession(t, other)
				if now := sessionContainer(t, rc.name, w.session); now != sessionCtr {
					t.Errorf("%s: the busy instance's session container was %q, is %q", rc.name, sessionCtr, now)
				}
				w.finish(t)
				deadline := time.Now().Add(30 * time.Second)
				for len(containersOf(t, rc.name, killed)) > 0 {
					if time.Now().After(deadline) {
						t.Fatalf("%s: containers of the killed instance remain: %v", rc.name, containersOf(t, rc.name, killed))
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		})
	}
}

// otherSession runs a one-shot job and a session on s.
func otherSession(t *testing.T, s *server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := tryRun(ctx, s.URL, "", "bash", "echo other"); err != nil {
		t.Fatal(err)
	}
	id, err := createSession(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer deleteSession(s.URL, id)
	if err := tryRun(ctx, s.URL, id, "bash", "echo in-session"); err != nil {
		t.Fatal(err)
	}
}

// work is a stream of calls on one server: a job running throughout, a
// session written once and read again and again, one-shot jobs (new
// sandboxes: pool refills) and new sessions.
type work struct {
	s       *server
	long    string
	session string
	stop    chan struct{}
	done    chan struct{}
	calls   int
	failed  int
	errs    []error // the first few failures
}

// prepareWork starts the long job and writes the session; run starts the
// stream of calls.
func prepareWork(s *server) *work {
	s.t.Helper()
	w := &work{s: s, stop: make(chan struct{}), done: make(chan struct{})}
	w.long = s.submit(map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 10; echo long-done"}})
	// Limits no pooled profile has: the session's own sandbox, made with
	// its session label (one that takes a pooled sandbox, when the pool
	// is ready in time, keeps that sandbox's labels, and sessionContainer
	// would not find it).
	var ses struct{ ID string }
	if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"effects": []string{"exec", "file_read", "file_write"},
		"limits": map[string]any{"disk_bytes": 48 << 20}}, &ses); resp.StatusCode != 201 {
		s.t.Fatalf("create session: %d %s", resp.StatusCode, data)
	}
	id := ses.ID
	w.session = id
	if err := tryRun(context.Background(), s.URL, id, "bash", "echo kept > mark"); err != nil {
		s.t.Fatal(err)
	}
	s.waitState(w.long, "running", time.Minute)
	return w
}

func (w *work) run() {
	s, ctx := w.s, context.Background()
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			err := tryRun(cctx, s.URL, w.session, "bash", "cat mark")
			if err == nil {
				err = tryRun(cctx, s.URL, "", "bash", fmt.Sprintf("echo oneshot-%d", i))
			}
			if err == nil && i%3 == 0 {
				var sid string
				if sid, err = createSession(cctx, s.URL); err == nil {
					err = tryRun(cctx, s.URL, sid, "bash", "echo fresh")
					deleteSession(s.URL, sid)
				}
			}
			cancel()
			w.calls++
			if err != nil {
				w.failed++
				if len(w.errs) < 3 {
					w.errs = append(w.errs, err)
				}
			}
		}
	}()
}

// finish stops the stream and checks that every call and the long job
// succeeded.
func (w *work) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	if w.failed > 0 {
		t.Errorf("%d of %d rounds of calls on the busy instance failed while the other restarted; the first: %v", w.failed, w.calls, w.errs)
	}
	if w.calls == 0 {
		t.Error("no call ran on the busy instance")
	}
	t.Logf("%d rounds of calls on the busy instance while the other restarted", w.calls)
	if j := w.s.waitTerminal(w.long, time.Minute); j.State != "succeeded" || !strings.Contains(j.Result.Content, "long-done") {
		t.Errorf("the busy instance's running job: %s/%s %+v", j.State, j.Reason, j.Result)
	}
	deleteSession(w.s.URL, w.session)
}

// tryRun runs a tool call (in session, if not empty) and reports any
// failure as an error (for goroutines).
func tryRun(ctx context.Context, base, session, tool, command string) error {
	body := map[string]any{"tool": tool, "arguments": map[string]any{"command": command}}
	if session != "" {
		body["session_id"] = session
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/jobs?wait=true", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var j jobView
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &j); err != nil || resp.StatusCode != 200 || j.Result == nil || !j.Result.OK {
		return fmt.Errorf("%s %q (session %q): status %d: %s", tool, command, session, resp.StatusCode, data)
	}
	return nil
}

// sessionContainer is the container of a session ("" on the local runner).
func sessionContainer(t testing.TB, runner, session string) string {
	t.Helper()
	var out []byte
	var err error
	switch runner {
	case "docker":
		out, err = exec.Command("docker", "ps", "-aq", "--no-trunc", "--filter", "label=session="+session).Output()
	case "containerd":
		out, err = exec.Command("ctr", "-n", "sandboxd", "containers", "list", "-q", fmt.Sprintf(`labels."session"==%s`, session)).Output()
	default:
		return ""
	}
	if err != nil {
		t.Fatalf("list %s containers: %v", runner, err)
	}
	ids := strings.Fields(string(out))
	if len(ids) != 1 {
		t.Fatalf("%s containers of session %s: %v", runner, session, ids)
	}
	return ids[0]
}

// containersOf lists the containers of the sandboxd process pid on runner
// (docker or containerd; none for local), by their owner-proc label.
func containersOf(t testing.TB, runner string, pid int) []string {
	t.Helper()
	var out []byte
	var err error
	switch runner {
	case "docker":
		out, err = exec.Command("docker", "ps", "-a", "--no-trunc", "--filter", "label=sandboxd.owner-proc",
			"--format", `{{.ID}} {{.Label "sandboxd.owner-proc"}}`).Output()
	case "containerd":
		var ids []byte
		ids, err = exec.Command("ctr", "-n", "sandboxd", "containers", "list", "-q", fmt.Sprintf(`labels."sandboxd.owner-proc"~="^%d:"`, pid)).Output()
		for _, id := range strings.Fields(string(ids)) {
			out = append(out, fmt.Sprintf("%s %d:\n", id, pid)...)
		}
	default:
		return nil
	}
	if err != nil {
		t.Fatalf("list %s containers: %v", runner, err)
	}
	var own []string
	for _, line := range strings.Split(string(out), "\n") {
		if id, owner, ok := strings.Cut(line, " "); ok && strings.HasPrefix(owner, strconv.Itoa(pid)+":") {
			own = append(own, id)
		}
	}
	return own
}

// TestInstanceStateDirTooLong: a data dir too long for the container
// runners' socket paths stops sandboxd at start, saying so (every sandbox
// used to fail after the agent's 10 s start timeout instead).
func TestInstanceStateDirTooLong(t *testing.T) {
	for _, runner := range []string{"docker", "containerd"} {
		t.Run(runner, func(t *testing.T) {
			if runner == "docker" {
				needDocker(t)
			}
			dir := filepath.Join(dataDir(t), strings.Repeat("d", 60))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			addrs := freeAddrs(t, 2)
			cmd := exec.CommandContext(ctx, binPath, "serve", "--addr", addrs[0], "--metrics-addr", addrs[1], "--data-dir", dir, "--runner", runner)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil || !strings.Contains(string(out), "too long for the sandboxes' unix sockets") {
				t.Fatalf("sandboxd with a %d-byte data dir: %v\n%s", len(dir), err, out)
			}
		})
	}
}
