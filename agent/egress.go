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
	return ForwardEgressTo(ctx, l, func(ctx context.Context) (net.Conn, error) {
		d := net.Dialer{Timeout: egressDialTimeout}
		return d.DialContext(ctx, "unix", socketPath)
	}, log)
}

// ForwardEgressTo is ForwardEgress with the upstream of each connection
// from dial (ReverseEgress.Take for the Kubernetes runner).
func ForwardEgressTo(ctx context.Context, l net.Listener, dial func(context.Context) (net.Conn, error), log *slog.Logger) error {
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
			up, err := dial(ctx)
			if err != nil {
				log.Warn("egress forward: upstream", "err", err)
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

// ReverseEgress holds the connections sandboxd opened to the agent (over
// a TokenListener: only sandboxd has the token) for the agent to carry the
// sandbox's proxy connections on, when the pod has no route to sandboxd
// (the Kubernetes runner: the pod has no egress at all). Take hands one
// out and tells sandboxd so with one byte (ReverseTaken), after which the
// connection carries the proxied bytes unchanged; sandboxd then opens the
// next.
type ReverseEgress struct {
	conns chan net.Conn
}

// ReverseTaken is the byte the agent sends on a reverse egress connection
// when it starts carrying a proxied connection on it.
const ReverseTaken = 0x01

// NewReverseEgress accepts sandboxd's reverse connections on l until ctx
// ends.
func NewReverseEgress(ctx context.Context, l net.Listener) *ReverseEgress {
	re := &ReverseEgress{conns: make(chan net.Conn, 64)}
	context.AfterFunc(ctx, func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			select {
			case re.conns <- c:
			default:
				c.Close() // sandboxd keeps only a few idle: more is not its doing
			}
		}
	}()
	return re
}

// Take returns an idle reverse connection, waiting up to
// egressDialTimeout for sandboxd to open one.
func (re *ReverseEgress) Take(ctx context.Context) (net.Conn, error) {
	t := time.NewTimer(egressDialTimeout)
	defer t.Stop()
	for {
		select {
		case c := <-re.conns:
			if _, err := c.Write([]byte{ReverseTaken}); err != nil {
				c.Close()
				continue // gone while idle: the next
			}
			return c, nil
		case <-t.C:
			return nil, errors.New("no reverse egress connection from sandboxd")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
