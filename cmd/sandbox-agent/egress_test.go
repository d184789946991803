package main

import (
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEgressFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--stdio", "--egress-listen", "127.0.0.1:0"},
		{"--stdio", "--egress-socket", "/tmp/e.sock"},
	} {
		out, err := agentCmd(args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "go together") {
			t.Errorf("%v: %v %s", args, err, out)
		}
	}
}

// TestEgressForwarding: with --egress-listen the agent forwards TCP
// connections to the egress socket byte for byte.
func TestEgressForwarding(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hostSock := filepath.Join(dir, "egress.sock")
	host, err := net.Listen("unix", hostSock)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				c.Write([]byte("proxied:" + string(b)))
			}()
		}
	}()
	// A free port for the agent's listener.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := agentCmd("--socket", filepath.Join(dir, "run", "agent.sock"), "--root", codeDir(t), "--egress-listen", addr, "--egress-socket", hostSock)
	waitReady(t, cmd)
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("CONNECT x:443 HTTP/1.1\r\n\r\n"))
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "proxied:CONNECT x:443 HTTP/1.1\r\n\r\n" {
		t.Fatalf("read %q, %v", b, err)
	}
}
