package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"hookgate/storage"
)

var _ storage.Cluster = (*DB)(nil)

// CatalogVersion returns the catalog's change counter (a trigger bumps it
// with every write of an endpoint or source, by any gateway).
func (db *DB) CatalogVersion(ctx context.Context) (int64, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	var v int64
	err := db.pool.QueryRow(ctx, `SELECT version FROM catalog_version WHERE id = 1`).Scan(&v)
	return v, db.fail("read the catalog version", err)
}

// lockCheckEvery is how often a held lock's connection is checked: a
// holder learns within about this long that its lock is gone.
const lockCheckEvery = time.Second

// TryLock takes a session advisory lock on a connection of its own, held
// until unlock (or the connection's end, which the database sees as the
// holder's death and releases it).
func (db *DB) TryLock(ctx context.Context, name string) (func(), <-chan struct{}, bool, error) {
	return db.lock(ctx, name, false)
}

// Lock waits for the advisory lock name.
func (db *DB) Lock(ctx context.Context, name string) (func(), <-chan struct{}, error) {
	unlock, lost, _, err := db.lock(ctx, name, true)
	return unlock, lost, err
}

func (db *DB) lock(ctx context.Context, name string, wait bool) (func(), <-chan struct{}, bool, error) {
	if err := db.check(); err != nil {
		return nil, nil, false, err
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, false, db.fail("lock "+name, err)
	}
	ok := true
	if wait {
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock(hashtextextended(current_schema() || '/' || $1, 0))`, name)
	} else {
		err = conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended(current_schema() || '/' || $1, 0))`, name).Scan(&ok)
	}
	if err != nil || !ok {
		conn.Release()
		return nil, nil, false, db.fail("lock "+name, err)
	}
	h := &heldLock{conn: conn, name: name, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go h.watch()
	return h.unlock, h.lost, true, nil
}

// heldLock is an advisory lock and the connection that holds it.
type heldLock struct {
	conn *pgxpool.Conn
	name string
	lost chan struct{} // closed when the connection (so the lock) is gone
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// watch pings the lock's connection until unlock: a failed ping means the
// session, and the lock with it, may be gone.
func (h *heldLock) watch() {
	defer close(h.done)
	t := time.NewTicker(lockCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), lockCheckEvery)
		err := h.conn.Ping(ctx)
		cancel()
		if err != nil {
			close(h.lost)
			return
		}
	}
}

// unlock releases the lock; safe to call more than once.
func (h *heldLock) unlock() {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		select {
		case <-h.lost:
			// The session is gone: so is the lock; the connection is not
			// returned to the pool.
			_ = h.conn.Conn().Close(context.Background())
		default:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := h.conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended(current_schema() || '/' || $1, 0))`, h.name)
			cancel()
			if err != nil {
				_ = h.conn.Conn().Close(context.Background())
			}
		}
		h.conn.Release()
	})
}
