// Package pgtest starts a real PostgreSQL server for tests: Debian's
// postgresql package (scripts/setup.sh installs it), initdb'd into a
// temporary directory and run by the test itself, without systemd, as an
// unprivileged user when the test runs as root (postgres refuses root). It
// listens on a unix socket in its own directory only, so it never collides
// with another engineer's server or a system one.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	logPath         string
	cmd             *exec.Cmd
	exited          chan struct{}
}

var dbSeq atomic.Int64

// binDir finds PostgreSQL's server programs (initdb, postgres).
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) == 0 {
		return "", errNoPostgres
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
// silently without it). settings are postgresql.conf lines.
func Start(t testing.TB, settings ...string) *Server {
	t.Helper()
	s, err := New(settings...)
	if err != nil {
		if errors.Is(err, errNoPostgres) && os.Getenv("SANDBOXD_SKIP_POSTGRES") == "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

var (
	sharedMu  sync.Mutex
	shared    *Server
	sharedErr error
)

// Shared returns the test binary's one shared server, started on first
// use; tests take their own database of it (NewDatabase). Main stops it.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = New()
	}
	if sharedErr != nil {
		if errors.Is(sharedErr, errNoPostgres) && os.Getenv("SANDBOXD_SKIP_POSTGRES") == "1" {
			t.Skip(sharedErr)
		}
		t.Fatal(sharedErr)
	}
	return shared
}

// Main runs the tests and then stops the shared server: call it from
// TestMain.
func Main(m *testing.M) {
	code := m.Run()
	sharedMu.Lock()
	if shared != nil {
		shared.Close()
	}
	sharedMu.Unlock()
	os.Exit(code)
}

var errNoPostgres = errors.New("initdb not found: install the postgresql package (scripts/setup.sh)")

// New initdb's and starts a server; Close stops it and removes its files.
func New(settings ...string) (_ *Server, err error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sandboxd-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, data: filepath.Join(dir, "data"), sock: filepath.Join(dir, "sock")}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if os.Geteuid() == 0 {
		uid, gid, err := unprivileged()
		if err != nil {
			return nil, err
		}
		s.cred = &syscall.Credential{Uid: uid, Gid: gid}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(s.sock, 0o700); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.sock, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, err
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", "postgres",
		"--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	conf := []string{
		"listen_addresses = ''",
		"unix_socket_directories = '" + s.sock + "'",
		"max_connections = 300",
		"shared_buffers = 32MB",
		// The tests' server is thrown away: no fsync (the store's
		// semantics do not depend on it; a benchmark may set it back).
		"fsync = off",
		"full_page_writes = off",
		"log_min_messages = warning",
	}
	conf = append(conf, settings...)
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, err = f.WriteString("\n" + strings.Join(conf, "\n") + "\n")
	f.Close()
	if err != nil {
		return nil, err
	}
	s.logPath = filepath.Join(dir, "postgres.log")
	return s, s.start(bin)
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
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

func (s *Server) start(bin string) error {
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", s.data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
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
			return nil
		}
		select {
		case <-s.exited:
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("postgres exited at start: %s", b)
		default:
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.logPath)
			return fmt.Errorf("postgres not ready after 60s: %v\n%s", err, b)
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
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	bin, err := binDir()
	if err == nil {
		err = s.start(bin)
	}
	if err != nil {
		t.Fatal(err)
	}
}
