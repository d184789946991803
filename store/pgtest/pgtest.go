// Package pgtest starts a real PostgreSQL server for tests: Debian's
// postgresql package (scripts/setup.sh installs it), initdb'd into a
// temporary directory and run by the test itself, without systemd, as an
// unprivileged user when the test runs as root (postgres refuses root). It
// listens on a unix socket in its own directory only, so it never collides
// with another engineer's server or a system one.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is one running PostgreSQL instance owned by a test.
type Server struct {
	dir, data, sock string
	cred            *syscall.Credential
	cmd             *exec.Cmd
	exited          chan struct{}
	log             *os.File
	t               testing.TB
}

var dbSeq atomic.Int64

// binDir finds PostgreSQL's server programs (initdb, postgres).
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", fmt.Errorf("initdb not found: install the postgresql package (scripts/setup.sh)")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// Available reports whether a server can be started here.
func Available() bool {
	_, err := binDir()
	return err == nil
}

// Start initdb's and starts a server; t.Cleanup stops it and removes its
// files. A missing postgresql package fails the test (skips only when
// SANDBOXD_SKIP_POSTGRES=1: Postgres is a real part, tests must not pass
// silently without it).
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		if os.Getenv("SANDBOXD_SKIP_POSTGRES") == "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sandboxd-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{dir: dir, data: filepath.Join(dir, "data"), sock: filepath.Join(dir, "sock"), t: t}
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		uid, gid, err := unprivileged()
		if err != nil {
			t.Fatal(err)
		}
		s.cred = &syscall.Credential{Uid: uid, Gid: gid}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(s.sock, 0o700); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		if err := os.Chown(s.sock, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", "postgres",
		"--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	conf := []string{
		"listen_addresses = ''",
		"unix_socket_directories = '" + s.sock + "'",
		"max_connections = 200",
		"shared_buffers = 32MB",
		// The tests' server is thrown away: no fsync (the store's
		// semantics do not depend on it; the benchmark sets it back).
		"fsync = off",
		"full_page_writes = off",
		"log_min_messages = warning",
	}
	conf = append(conf, settings...)
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("\n" + strings.Join(conf, "\n") + "\n")
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if s.log, err = os.Create(filepath.Join(dir, "postgres.log")); err != nil {
		t.Fatal(err)
	}
	if s.cred != nil {
		os.Chown(s.log.Name(), int(s.cred.Uid), int(s.cred.Gid))
	}
	s.start(bin)
	return s
}

func unprivileged() (uint32, uint32, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return uint32(uid), uint32(gid), nil
	}
	return 0, 0, fmt.Errorf("no unprivileged user (postgres or nobody) to run postgres as")
}

func (s *Server) start(bin string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", s.data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start postgres: %v", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(s.exited) }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(s.log.Name())
			s.t.Fatalf("postgres exited at start: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.log.Name())
			s.t.Fatalf("postgres not ready after 60s: %v\n%s", err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the connection URL of database db on this server.
func (s *Server) URL(db string) string {
	q := url.Values{}
	q.Set("host", s.sock)
	q.Set("user", "postgres")
	q.Set("sslmode", "disable")
	return "postgres:///" + db + "?" + q.Encode()
}

// NewDatabase creates an empty database and returns its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return s.URL(name)
}

// Stop shuts the server down (fast shutdown: open connections are cut)
// and waits for it. A stopped server's data stays; Restart starts it
// again.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited:
	default:
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exited
		}
	}
	s.cmd = nil
}

// Restart starts a stopped server on the same data.
func (s *Server) Restart() {
	s.t.Helper()
	bin, err := binDir()
	if err != nil {
		s.t.Fatal(err)
	}
	s.start(bin)
}
