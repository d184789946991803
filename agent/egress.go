package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// egressDialTimeout bounds connecting to the host's egress socket.
const egressDialTimeout = 10 * time.Second

// ForwardEgress accepts connections on l (the sandbox's egress proxy
// address, 127.0.0.1:3128 on its own loopback) and carries each one, byte
// for byte, to the unix socket at socketPath, where sandboxd's egress proxy
// decides what may pass. It understands nothing of what it forwards. A
// half-close in one direction is passed on; a connection ends when both
// directions have. It returns when ctx is done (closing l and every
// forwarded connection) or when l fails.
//
// The socket path is dialled anew for each connection. In sandboxd's
// sandboxes it lies in the agent's own directory (runner.AgentDir, mode
// 0700, uid 0), which the code can neither reach nor change: the code gets
// out only through this forwarder.
func ForwardEgress(ctx context.Context, l net.Listener, socketPath string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer func() {
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			track(c, true)
			defer track(c, false)
			defer c.Close()
			d := net.Dialer{Timeout: egressDialTimeout}
			up, err := d.DialContext(ctx, "unix", socketPath)
			if err != nil {
				log.Warn("egress forward: dial host socket", "err", err)
				return
			}
			track(up, true)
			defer track(up, false)
			defer up.Close()
			splice(c, up)
		}()
	}
}

// splice copies both ways; EOF on one side half-closes the other, an error
// closes both. It returns when both directions have ended.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err == nil {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				return
			}
		}
		a.Close()
		b.Close()
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
}
