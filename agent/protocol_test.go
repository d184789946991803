package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// rawConn connects to a fresh server without a Client.
func rawServerConn(t *testing.T) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ServeConn(ctx, server, ServerOptions{Root: t.TempDir(), PythonPath: testPython})
	}()
	t.Cleanup(func() {
		client.Close()
		cancel()
		<-done
	})
	return client
}

func writeRaw(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func readRaw(t *testing.T, c net.Conn) (frame, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	f, _, err := readFrame(c, nil)
	return f, err
}

func TestServerAnswersBadRequests(t *testing.T) {
	t.Parallel()
	c := rawServerConn(t)
	tests := []struct {
		body, want string
	}{
		{`{"id":1,"type":"frobnicate"}`, "unknown message type"},
		{`{"id":0,"type":"ping"}`, "without id"},
		{`{"id":2,"type":"exec","exec":{"args":[]}}`, "empty argv"},
		{`{"id":3,"type":"exec"}`, "empty argv"},
		{`{"id":4,"type":"repl"}`, "missing"},
		{`{"id":5,"type":"read_file","path":"../x"}`, "escapes"},
	}
	for _, tt := range tests {
		writeRaw(t, c, rawFrame([]byte(tt.body)))
		f, err := readRaw(t, c)
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		if f.Type != typeError || !strings.Contains(f.Error, tt.want) {
			t.Errorf("%s: got %+v, want error %q", tt.body, f, tt.want)
		}
	}
	// The connection is still usable.
	writeRaw(t, c, rawFrame([]byte(`{"id":9,"type":"ping"}`)))
	if f, err := readRaw(t, c); err != nil || f.Type != typeResult || f.ID != 9 {
		t.Errorf("ping after errors: %+v %v", f, err)
	}
}

func TestServerClosesOnGarbage(t *testing.T) {
	t.Parallel()
	hdr := func(n uint32) []byte {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], n)
		return b[:]
	}
	tests := map[string][]byte{
		"not json":       rawFrame([]byte("GET / HTTP/1.1")),
		"too large":      hdr(MaxFrameSize + 1),
		"empty":          hdr(0),
		"response frame": rawFrame([]byte(`{"id":1,"type":"result"}`)),
		"no type":        rawFrame([]byte(`{"id":1}`)),
	}
	for name, in := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := rawServerConn(t)
			go c.Write(in) // net.Pipe: the server may close before reading all
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadAll(c); err != nil {
				t.Fatalf("connection not closed by the server: %v", err)
			}
		})
	}
}

// fakeAgent serves the client half of a net.Pipe with a handler that
// sees each request.
func fakeAgent(t *testing.T, handle func(server net.Conn, f frame)) *Client {
	t.Helper()
	cc, sc := net.Pipe()
	go func() {
		for {
			f, _, err := readFrame(sc, nil)
			if err != nil {
				sc.Close()
				return
			}
			handle(sc, f)
		}
	}()
	c := NewClient(cc)
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientServerDiesMidRequest(t *testing.T) {
	t.Parallel()
	c := fakeAgent(t, func(sc net.Conn, f frame) {
		b, _ := encodeFrame(&frame{ID: f.ID, Type: typeOutput, Stream: "stdout", Data: []byte("partial")})
		sc.Write(b)
		sc.Close()
	})
	start := time.Now()
	_, err := c.Exec(context.Background(), ExecRequest{Args: []string{"x"}}, nil)
	if !errors.Is(err, ErrClosed) {
		t.Errorf("err = %v, want ErrClosed", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Error("slow")
	}
	if err := c.Ping(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("ping after death: %v", err)
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed")
	}
}

func TestClientHostileAgent(t *testing.T) {
	t.Parallel()
	tests := map[string]func(sc net.Conn, f frame){
		"garbage": func(sc net.Conn, f frame) { sc.Write([]byte("\x00\x00\x00\x05hello")) },
		"huge frame": func(sc net.Conn, f frame) {
			sc.Write([]byte{0x7f, 0xff, 0xff, 0xff})
		},
		"half frame then silence": func(sc net.Conn, f frame) {
			sc.Write([]byte{0, 0, 1, 0, '{'})
		},
		"unexpected type": func(sc net.Conn, f frame) {
			b, _ := encodeFrame(&frame{ID: f.ID, Type: typeExec})
			sc.Write(b)
		},
		"result without payload": func(sc net.Conn, f frame) {
			b, _ := encodeFrame(&frame{ID: f.ID, Type: typeResult})
			sc.Write(b)
		},
		"silence": func(sc net.Conn, f frame) {},
		"wrong id": func(sc net.Conn, f frame) {
			b, _ := encodeFrame(&frame{ID: f.ID + 100, Type: typeResult})
			sc.Write(b)
		},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := fakeAgent(t, h)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.Exec(ctx, ExecRequest{Args: []string{"x"}}, nil)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Error("Exec succeeded against a hostile agent")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Exec hung")
			}
		})
	}
}

func TestClientCloseUnblocksCalls(t *testing.T) {
	t.Parallel()
	c := fakeAgent(t, func(net.Conn, frame) {})
	done := make(chan error, 1)
	go func() { done <- c.Ping(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("err = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Ping hung after Close")
	}
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	c, _ := startServer(t, ServerOptions{})
	if err := c.Shutdown(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not close the connection after shutdown")
	}
}

func TestDialRetriesUntilListening(t *testing.T) {
	t.Parallel()
	sock := t.TempDir() + "/late.sock"
	go func() {
		time.Sleep(200 * time.Millisecond)
		l, err := net.Listen("unix", sock)
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		Serve(ctx, l, ServerOptions{})
	}()
	c, err := Dial(testCtx(t, 5*time.Second), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(testCtx(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := Dial(ctx, t.TempDir()+"/never.sock"); err == nil {
		t.Error("Dial to nothing succeeded")
	}
}

func FuzzServerFrames(f *testing.F) {
	f.Add([]byte(`{"id":1,"type":"ping"}`), []byte(`{"id":2,"type":"list_dir","path":""}`))
	f.Add([]byte(`{"id":1,"type":"exec","exec":{"args":["sh"]}}`), []byte(`{"id":2,"type":"cancel","target":1}`))
	f.Add([]byte(`{"id":1,"type":"write_file","path":"a/b","data":"aGk=","mode":420}`), []byte(`{"id":2,"type":"read_file","path":"a/b"}`))
	f.Add([]byte(`{"id":1,"type":"remove","path":"a","recursive":true}`), []byte(`{"id":1,"type":"shutdown"}`))
	f.Add([]byte(`{"id":1,"type":"stat","path":"../../etc"}`), []byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		cc, sc := net.Pipe()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			ServeConn(ctx, sc, ServerOptions{Root: t.TempDir(), disableProcs: true})
		}()
		go io.Copy(io.Discard, cc)
		for _, body := range [][]byte{a, b} {
			cc.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := cc.Write(rawFrame(body)); err != nil {
				break
			}
		}
		cc.Close()
		<-done
	})
}

func TestClientCapsStreamedOutput(t *testing.T) {
	t.Parallel()
	c := fakeAgent(t, func(sc net.Conn, f frame) {
		chunk := make([]byte, 64<<10)
		for range 20 {
			b, _ := encodeFrame(&frame{ID: f.ID, Type: typeOutput, Stream: "stdout", Data: chunk})
			if _, err := sc.Write(b); err != nil {
				return
			}
		}
		b, _ := encodeFrame(&frame{ID: f.ID, Type: typeResult, ExecResult: &ExecResult{}})
		sc.Write(b)
	})
	var got int
	_, err := c.Exec(testCtx(t, 60*time.Second), ExecRequest{Args: []string{"x"}, OutputLimit: 1000}, func(_ string, b []byte) { got += len(b) })
	if err != nil {
		t.Fatal(err)
	}
	if got != 1000 {
		t.Errorf("delivered %d bytes, want 1000", got)
	}
}
