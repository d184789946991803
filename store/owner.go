package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Not used by serve any more (replicas hold leases: lease.go); kept for a
// deployment that wants exactly one process per database. Without
// replica coordination a second process on a database would run
// crash recovery against the first one's running jobs. The serving process
// holds a session advisory lock on a connection of its own; another
// process finds it held and refuses to start, naming the holder.

// ErrOwned: another sandboxd serves this database.
var ErrOwned = errors.New("another sandboxd serves this database")

// pgOwnerLock is the advisory lock key of the serving process
// ("sbxowner").
const pgOwnerLock = 0x7362786f776e6572

// ownerCheckInterval is how often the holder checks its lock's
// connection.
var ownerCheckInterval = 2 * time.Second

type owner struct {
	conn *pgx.Conn
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// HoldOwner takes the database's owner lock for this process, or returns
// ErrOwned naming the holder. Until Close it checks the lock's connection;
// when the connection is lost it reconnects and takes the lock again, and
// if another process took it meanwhile calls onLost (the caller stops
// serving at once: the other process now owns the jobs).
func (s *Postgres) HoldOwner(ctx context.Context, onLost func(error)) error {
	conn, err := s.lockOwner(ctx)
	if err != nil {
		return err
	}
	o := &owner{conn: conn, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.owner = o
	s.mu.Unlock()
	go o.watch(s, onLost)
	return nil
}

func (s *Postgres) lockOwner(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	host, _ := os.Hostname()
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("sandboxd owner %s pid %d", host, os.Getpid())
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, pgErr("owner lock", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(pgOwnerLock)).Scan(&ok); err != nil {
		conn.Close(context.Background())
		return nil, pgErr("owner lock", err)
	}
	if ok {
		return conn, nil
	}
	holder := "unknown"
	_ = conn.QueryRow(ctx, `SELECT a.application_name || COALESCE(' from ' || host(a.client_addr), '') || ' since ' || a.backend_start
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 LIMIT 1`,
		uint32(uint64(pgOwnerLock)>>32), uint32(uint64(pgOwnerLock)&0xffffffff)).Scan(&holder)
	conn.Close(context.Background())
	return nil, fmt.Errorf("%w (%s); several replicas on one database are not supported yet", ErrOwned, holder)
}

func (o *owner) watch(s *Postgres, onLost func(error)) {
	defer close(o.done)
	t := time.NewTicker(ownerCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ownerCheckInterval)
		err := o.conn.Ping(ctx)
		cancel()
		if err == nil {
			continue
		}
		// The connection, and with it the lock, is gone: take it again.
		o.conn.Close(context.Background())
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			conn, err := s.lockOwner(ctx)
			cancel()
			if err == nil {
				o.conn = conn
				break
			}
			if errors.Is(err, ErrOwned) {
				if onLost != nil {
					onLost(err)
				}
				o.conn = nil
				return
			}
			select { // the database is away: retry
			case <-o.stop:
				o.conn = nil
				return
			case <-time.After(ownerCheckInterval):
			}
		}
	}
}

func (o *owner) close() {
	o.once.Do(func() {
		close(o.stop)
		<-o.done
		if o.conn != nil {
			// Unlock first: closing alone releases the lock only when
			// the server has ended the session, a moment later.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = o.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(pgOwnerLock))
			o.conn.Close(ctx)
			cancel()
		}
	})
}
