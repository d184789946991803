package agent

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

// TestTokenListener: a connection with the right token is served; one
// with a wrong token, a short one or none never reaches the server.
func TestTokenListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	token := bytes.Repeat([]byte{7}, TokenBytes)
	l, err := TokenListener(raw, token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go Serve(ctx, l, ServerOptions{})

	c, err := DialToken(ctx, raw.Addr().String(), token)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping with the right token: %v", err)
	}

	wrong := bytes.Repeat([]byte{8}, TokenBytes)
	bad, err := DialToken(ctx, raw.Addr().String(), wrong)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if err := bad.Ping(pctx); err == nil {
		t.Fatal("ping with a wrong token answered")
	}

	// A silent connection does not block an honest one behind it.
	silent, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c2, err := DialToken(ctx, raw.Addr().String(), token)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Ping(pctx); err != nil {
		t.Fatalf("ping behind a silent connection: %v", err)
	}
	if _, err := TokenListener(raw, []byte("short")); err == nil {
		t.Fatal("short token accepted")
	}
}
