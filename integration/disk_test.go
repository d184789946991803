//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mountsUnder lists the mount points below dir, from /proc/self/mountinfo.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 5 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4]+" "+f[5])
		}
	}
	return out
}

// workspaceWith is the workspace mount point below root whose file name
// holds content (a marker a session wrote into its workspace).
func workspaceWith(t testing.TB, root, name, content string) string {
	t.Helper()
	var found []string
	for _, m := range mountsUnder(t, root) {
		dir := strings.Fields(m)[0]
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil && strings.TrimSpace(string(b)) == content {
			found = append(found, dir)
		}
	}
	if len(found) != 1 {
		t.Fatalf("workspace mounts below %s holding %s = %q: %v (all: %v)", root, name, content, found, mountsUnder(t, root))
	}
	return found[0]
}

// loopsBackedUnder lists the loop devices whose image lives below dir.
func loopsBackedUnder(dir string) []string {
	var out []string
	ents, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range ents {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

func waitGone(t testing.TB, what string, left func() []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(left()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s left: %v", what, left())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDiskLimitsThroughAPI, on every runner: a session's workspace is a
// filesystem of its disk limit (nosuid,nodev on the host); the code gets
// ENOSPC at the limit, in /tmp too; uploads that do not fit are 507
// workspace_full and write nothing; limits below the minimum or above the
// ceiling are 400; an OOM kill (under gVisor: a sandbox restart) keeps the
// workspace and its bound; delete releases it.
func TestDiskLimitsThroughAPI(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"local", nil},
		{"docker", []string{"--runner", "docker"}},
		{"docker-runsc", []string{"--runner", "docker", "--runtime", "runsc"}},
		{"containerd", []string{"--runner", "containerd"}},
		{"containerd-runsc", []string{"--runner", "containerd", "--runtime", "runsc"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "docker") {
				needDocker(t)
			}
			s := startServerArgs(t, "limits:\n  ceilings: {disk_bytes: 268435456}\npool:\n  size: 0\n", tc.args...)
			for _, bad := range []map[string]any{{"disk_bytes": 1 << 20}, {"disk_bytes": 1 << 30}, {"disk_inodes": 10}} {
				resp, data := s.do("POST", "/v1/sessions", "", map[string]any{"limits": bad}, nil)
				if resp.StatusCode != 400 || !strings.Contains(string(data), "disk_") {
					t.Errorf("session with limits %v: %d %s, want 400 naming the limit", bad, resp.StatusCode, data)
				}
			}
			var sess struct {
				ID     string
				Limits struct {
					DiskBytes  int64 `json:"disk_bytes"`
					DiskInodes int64 `json:"disk_inodes"`
				}
			}
			resp, data := s.do("POST", "/v1/sessions", "", map[string]any{
				"limits": map[string]any{"disk_bytes": 32 << 20, "disk_inodes": 1024, "memory_bytes": 128 << 20},
			}, &sess)
			if resp.StatusCode != 201 || sess.Limits.DiskBytes != 32<<20 || sess.Limits.DiskInodes != 1024 {
				t.Fatalf("create: %d %s", resp.StatusCode, data)
			}
			ws := filepath.Join(s.DataDir, "workspaces", "sessions", sess.ID)
			mounts := strings.Join(mountsUnder(t, filepath.Join(s.DataDir, "workspaces")), "\n")
			if !strings.Contains(mounts, ws+" rw,nosuid,nodev") {
				t.Fatalf("session workspace not a nosuid,nodev mount of its own: %s", mounts)
			}

			// The code: bytes, files, and /tmp.
			j := s.runIn(sess.ID, "bash", map[string]any{"command": "echo kept > kept.txt; " +
				"dd if=/dev/zero of=big bs=1M count=64 2>&1 | grep -o 'No space left on device'; rm -f big; " +
				"python3 -c 'import os\nfor i in range(5000):\n  try: open(\"f%d\" % i, \"w\").close()\n  except OSError as e: print(\"files=%d\" % i, e.strerror); break'; rm -f f*; " +
				"dd if=/dev/zero of=/tmp/big bs=1M count=128 2>&1 | grep -o 'No space left on device'"})
			t.Logf("bash in the session:\n%s", j.Result.Content)
			want := "No space left on device\nfiles=1013 No space left on device\nNo space left on device\n"
			if j.Result.Content != want {
				t.Errorf("want ENOSPC for bytes in the workspace, after 1013 files (1024 inodes), and for bytes in /tmp:\n%s", j.Result.Content)
			}

			// Uploads.
			code, body := s.raw("PUT", "/v1/sessions/"+sess.ID+"/files/up.bin", make([]byte, 40<<20), "application/octet-stream")
			var e struct {
				Error struct{ Code, Message string }
			}
			json.Unmarshal(body, &e)
			if code != 507 || e.Error.Code != "workspace_full" {
				t.Errorf("PUT 40 MiB into 32: %d %s, want 507 workspace_full", code, body)
			}
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			tw.WriteHeader(&tar.Header{Name: "a/big.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: 20 << 20})
			tw.Write(make([]byte, 20<<20))
			tw.Close()
			if code, body := s.raw("POST", "/v1/sessions/"+sess.ID+"/archive?path=up", buf.Bytes(), "application/x-tar"); code != 507 {
				t.Errorf("archive of 20 MiB (spooled and unpacked in 32): %d %s, want 507", code, body)
			}
			ents, _ := os.ReadDir(ws)
			if len(ents) != 1 || ents[0].Name() != "kept.txt" {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Errorf("workspace after refused uploads: %v, want only kept.txt", names)
			}
			if code, body := s.raw("PUT", "/v1/sessions/"+sess.ID+"/files/small.txt", []byte("fits"), "application/octet-stream"); code != 200 {
				t.Errorf("PUT a small file: %d %s", code, body)
			}

			// An OOM kill (of the whole sandbox under gVisor, which the
			// runner restarts) keeps the workspace, still bounded.
			j = s.runIn(sess.ID, "bash", map[string]any{"command": "python3 -c 'x = bytearray(512 << 20)'"})
			if j.Result.Process == nil || !j.Result.Process.OOMKilled {
				t.Errorf("512 MiB in a 128 MiB sandbox: %+v, want an OOM kill", j.Result)
			}
			j = s.runIn(sess.ID, "bash", map[string]any{"command": "cat kept.txt small.txt; dd if=/dev/zero of=big bs=1M count=64 2>&1 | grep -o 'No space left on device'; rm -f big"})
			if !strings.Contains(j.Result.Content, "kept") || !strings.Contains(j.Result.Content, "fits") ||
				!strings.Contains(j.Result.Content, "No space left on device") {
				t.Errorf("after the OOM kill: %q, want the files and ENOSPC", j.Result.Content)
			}

			if resp, data := s.do("DELETE", "/v1/sessions/"+sess.ID, "", nil, nil); resp.StatusCode != 200 {
				t.Fatalf("delete: %d %s", resp.StatusCode, data)
			}
			waitGone(t, "mounts", func() []string { return mountsUnder(t, filepath.Join(s.DataDir, "workspaces")) })
			waitGone(t, "loop devices", func() []string { return loopsBackedUnder(filepath.Join(s.DataDir, "workspaces")) })
		})
	}
}

// TestWorkspacesReleasedAfterKill: sandboxd is killed with SIGKILL while
// sessions and a running job hold workspaces; their mounts stay until the
// next start, which releases them (and their loop devices), while another
// sandboxd's workspaces on the same host are untouched: every mount it had
// before the kill, and the workspaces of its two sessions, one that made its
// own (sessions/<id>) and one that took a pooled sandbox and kept that
// sandbox's workspace (pool/<id>: job/pool.go usePooledSession). Which of
// the two a session gets depends on whether the pool is ready when it is
// created, so each is made on purpose and found by a marker file it wrote,
// not by its path.
func TestWorkspacesReleasedAfterKill(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"local", nil},
		{"docker", []string{"--runner", "docker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "docker" {
				needDocker(t)
			}
			other := startServerArgs(t, "", tc.args...)
			otherRoot := filepath.Join(other.DataDir, "workspaces")
			// Its own workspace: limits no pooled profile has.
			var own sessionView
			if resp, data := other.do("POST", "/v1/sessions", "", map[string]any{"limits": map[string]any{"disk_bytes": 48 << 20}}, &own); resp.StatusCode != 201 {
				t.Fatalf("create: %d %s", resp.StatusCode, data)
			}
			// A pooled sandbox's workspace: made once the pool is ready.
			if err := waitPoolReady(other.MetricsURL, 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // ready means made; its REPL warms meanwhile
			hits := metricValue(t, other, "sandboxd_pool_hits_total")
			var keep sessionView
			if resp, data := other.do("POST", "/v1/sessions", "", map[string]any{}, &keep); resp.StatusCode != 201 {
				t.Fatalf("create: %d %s", resp.StatusCode, data)
			}
			if h := metricValue(t, other, "sandboxd_pool_hits_total"); h != hits+1 {
				t.Fatalf("pool hits %v → %v: the session did not take a pooled sandbox", hits, h)
			}
			otherWS := map[string]string{} // session → its workspace on the host
			for _, id := range []string{own.ID, keep.ID} {
				other.runIn(id, "bash", map[string]any{"command": "echo " + id + " > .marker"})
				otherWS[id] = workspaceWith(t, otherRoot, ".marker", id)
			}
			if want := filepath.Join(otherRoot, "sessions", own.ID); otherWS[own.ID] != want {
				t.Fatalf("session %s's workspace is %s, want %s", own.ID, otherWS[own.ID], want)
			}
			if !strings.HasPrefix(otherWS[keep.ID], filepath.Join(otherRoot, "pool")+"/") {
				t.Fatalf("pooled session %s's workspace is %s, want one under pool/", keep.ID, otherWS[keep.ID])
			}
			s := startServerArgs(t, "pool:\n  size: 1\nshutdown_timeout: 5s\n", tc.args...)
			root := filepath.Join(s.DataDir, "workspaces")
			for range 2 {
				if resp, data := s.do("POST", "/v1/sessions", "", map[string]any{}, nil); resp.StatusCode != 201 {
					t.Fatalf("create: %d %s", resp.StatusCode, data)
				}
			}
			// A one-shot job running at the kill (lost at the restart, not
			// run again).
			var j jobView
			if resp, data := s.do("POST", "/v1/jobs", "", map[string]any{"tool": "bash", "arguments": map[string]any{"command": "sleep 300"}}, &j); resp.StatusCode != 202 {
				t.Fatalf("submit: %d %s", resp.StatusCode, data)
			}
			deadline := time.Now().Add(30 * time.Second)
			for (j.State != "running" || len(mountsUnder(t, root)) < 3) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
				s.do("GET", "/v1/jobs/"+j.ID, "", nil, &j)
			}
			before := mountsUnder(t, root)
			if len(before) < 3 {
				t.Fatalf("want 3 workspace mounts or more (2 sessions, 1 job, pooled), have %v", before)
			}
			// Also what the first sandboxd's first start (its Cleanup) left.
			otherBefore := mountsUnder(t, otherRoot)
			for id, ws := range otherWS {
				if !slices.ContainsFunc(otherBefore, func(m string) bool { return strings.Fields(m)[0] == ws }) {
					t.Fatalf("the other sandboxd's session %s workspace %s is not mounted before the kill: %v", id, ws, otherBefore)
				}
			}
			s.stop(syscall.SIGKILL)
			if left := mountsUnder(t, root); len(left) != len(before) {
				t.Fatalf("mounts after the kill: %v, before %v (the test proves nothing)", left, before)
			}
			t.Logf("left by the kill: %v", before)
			s.start()
			// The pool refills after the start: only its fresh workspace may
			// remain (in pool/, not the killed process's).
			waitGone(t, "the killed process's mounts", func() []string {
				var old []string
				for _, m := range mountsUnder(t, root) {
					for _, b := range before {
						if strings.Fields(m)[0] == strings.Fields(b)[0] {
							old = append(old, m)
						}
					}
				}
				return old
			})
			s.stop(syscall.SIGTERM)
			waitGone(t, "mounts after a clean stop", func() []string { return mountsUnder(t, root) })
			waitGone(t, "loop devices", func() []string { return loopsBackedUnder(root) })
			// The other's mounts may grow (its pool refills), never lose one.
			otherAfter := mountsUnder(t, otherRoot)
			for _, m := range otherBefore {
				if !slices.Contains(otherAfter, m) {
					t.Errorf("the other sandboxd's mount %s is gone (before %v, after %v)", m, otherBefore, otherAfter)
				}
			}
			for id, ws := range otherWS {
				if b, err := os.ReadFile(filepath.Join(ws, ".marker")); err != nil || strings.TrimSpace(string(b)) != id {
					t.Errorf("the other sandboxd's session %s workspace %s: marker %q, %v", id, ws, b, err)
				}
				if j := other.runIn(id, "bash", map[string]any{"command": "cat .marker && echo alive > f && cat f"}); !strings.Contains(j.Result.Content, id) || !strings.Contains(j.Result.Content, "alive") {
					t.Errorf("the other sandboxd's session %s: %+v", id, j.Result)
				}
			}
		})
	}
}

// TestServeRefusesWithoutWorkspaceFilesystems: a sandboxd that cannot make
// workspace filesystems (here: no /dev/loop-control, hidden in a mount
// namespace of its own) does not start, and says why, rather than run
// without disk limits.
func TestServeRefusesWithoutWorkspaceFilesystems(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not found")
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		"mount -t tmpfs none /dev && exec \"$0\" serve --addr 127.0.0.1:0 --data-dir \"$1\"", binPath, dir)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("sandboxd started without /dev/loop-control:\n%s", out)
	}
	if !strings.Contains(string(out), "loop-control") {
		t.Fatalf("the refusal does not say why:\n%s", out)
	}
}
