package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestForwardEgress: bytes go through unchanged both ways, a half-close
// from the sandbox side reaches the host side (which still answers), and
// cancelling stops the forwarder and its connections.
func TestForwardEgress(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "egress.sock")
	host, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	held := make(chan net.Conn, 1)
	go func() {
		for i := 0; ; i++ {
			c, err := host.Accept()
			if err != nil {
				return
			}
			if i == 1 {
				held <- c // kept open: cancel must end it
				continue
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the half-close
				io.WriteString(c, "echo:"+string(b))
			}()
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- ForwardEgress(ctx, l, sock, nil) }()

	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x\x00y", 50000)
	go func() {
		io.WriteString(c, payload)
		c.(*net.TCPConn).CloseWrite()
	}()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(b) != "echo:"+payload {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}

	// A second connection stays open until cancel.
	c2, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	hc := <-held
	defer hc.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ForwardEgress: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ForwardEgress did not return after cancel")
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("forwarded connection still open after cancel")
	}
	// Asked of the listener itself, not by dialling its port: once closed,
	// the port is free, and a parallel test's listener may take it.
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("listener still open after cancel: Accept = %v", err)
	}
}

// TestForwardEgressNoHost: without the host socket a connection is closed
// at once and the forwarder keeps serving.
func TestForwardEgressNoHost(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go ForwardEgress(ctx, l, filepath.Join(t.TempDir(), "missing.sock"), nil)
	for range 2 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read %d, %v; want EOF", n, err)
		}
		c.Close()
	}
}
