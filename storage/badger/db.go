// Package badger is hookgate's embedded storage engine, on Badger v4.
//
// All writes go through one writer goroutine that applies many callers'
// operations in one Badger transaction and commits it with a single fsync
// (group commit). A caller's write returns only after that commit, so
// nothing is acknowledged before it is on disk, and many concurrent writers
// share the cost of one fsync. Having one writer also means transactions
// never conflict: an operation reads and writes under the writer's lock.
package badger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

var _ storage.Store = (*DB)(nil)

// Writer batch bounds: a batch ends at whichever comes first. Badger refuses
// transactions over ~15% of a memtable, so stay well below.
const (
	maxBatchOps   = 1024
	maxBatchBytes = 4 << 20
)

// Options tunes the engine; zero values take the defaults.
type Options struct {
	// Logger receives Badger's warnings and errors; nil = slog.Default().
	Logger *slog.Logger
	// MemTableSize bounds one memtable (default 32 MiB).
	MemTableSize int64
	// BlockCacheSize bounds the block cache (default 64 MiB).
	BlockCacheSize int64
}

// DB is the Badger engine. Open it with Open, close it with Close.
type DB struct {
	db     *bdg.DB
	ops    chan *op
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
	log    *slog.Logger
	floors *floors

	mu       sync.RWMutex // guards isClosed against sends on ops
	isClosed bool
}

// op is one caller's share of a batch. fn must do all of its reads and
// checks before its first write, and return a non-nil error only before
// writing anything: the batch's transaction cannot undo one op's writes.
// fn may run more than once (a batch that grew too big is split and redone),
// so it must depend only on the transaction and its captured arguments.
type op struct {
	fn   func(txn *bdg.Txn) error
	size int // estimated bytes written
	err  error
	done chan struct{}
}

// Open opens (or creates) the store in dir.
func Open(dir string, o Options) (*DB, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := bdg.DefaultOptions(dir).
		WithSyncWrites(true).
		WithDetectConflicts(false).
		WithLogger(badgerLogger{log}).
		WithMemTableSize(cmpOr(o.MemTableSize, 32<<20)).
		WithBlockCacheSize(cmpOr(o.BlockCacheSize, 64<<20)).
		WithNumMemtables(3).
		WithNumCompactors(2).
		WithValueThreshold(64 << 10)
	bdb, err := bdg.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open badger at %s: %w", dir, err)
	}
	db := &DB{
		db:     bdb,
		ops:    make(chan *op, maxBatchOps),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		log:    log,
		floors: newFloors(),
	}
	go db.writeLoop()
	return db, nil
}

func cmpOr(v, d int64) int64 {
	if v > 0 {
		return v
	}
	return d
}

// Dir returns the directory the store lives in.
func (db *DB) Dir() string { return db.db.Opts().Dir }

// Close stops the writer after the operations already queued, then closes
// Badger (which flushes and syncs). Safe to call more than once.
func (db *DB) Close() error {
	var err error
	db.closed.Do(func() {
		db.mu.Lock()
		db.isClosed = true
		close(db.stop)
		db.mu.Unlock()
		<-db.done
		err = db.db.Close()
	})
	return err
}

// Ping reports whether the store is open and accepts a durable write.
func (db *DB) Ping(ctx context.Context) error {
	return db.update(ctx, 16, func(txn *bdg.Txn) error {
		return txn.Set(keyPing, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	})
}

// update runs fn in the next batch and waits until that batch is durable.
func (db *DB) update(ctx context.Context, size int, fn func(txn *bdg.Txn) error) error {
	o := &op{fn: fn, size: size, done: make(chan struct{})}
	db.mu.RLock()
	if db.isClosed {
		db.mu.RUnlock()
		return storage.ErrClosed
	}
	select {
	case db.ops <- o:
		db.mu.RUnlock()
	case <-ctx.Done():
		db.mu.RUnlock()
		return ctx.Err()
	}
	// Once queued, an op always runs: waiting for it even if ctx ends keeps
	// "returned an error" meaning "not written".
	<-o.done
	return o.err
}

// view runs fn in a read-only snapshot.
func (db *DB) view(fn func(txn *bdg.Txn) error) error {
	db.mu.RLock()
	closed := db.isClosed
	db.mu.RUnlock()
	if closed {
		return storage.ErrClosed
	}
	err := db.db.View(fn)
	if errors.Is(err, bdg.ErrDBClosed) {
		return storage.ErrClosed
	}
	return err
}

// writeLoop owns all writes. It drains queued ops into batches until stop,
// then finishes what is queued (senders cannot add more once isClosed).
func (db *DB) writeLoop() {
	defer close(db.done)
	batch := make([]*op, 0, maxBatchOps)
	for {
		var first *op
		select {
		case first = <-db.ops:
		case <-db.stop:
			for {
				select {
				case o := <-db.ops:
					db.commit([]*op{o})
				default:
					return
				}
			}
		}
		batch = append(batch[:0], first)
		size := first.size
	fill:
		for len(batch) < maxBatchOps && size < maxBatchBytes {
			select {
			case o := <-db.ops:
				batch = append(batch, o)
				size += o.size
			default:
				break fill
			}
		}
		db.commit(batch)
	}
}

// commit applies a batch in one transaction and one fsync, and signals each
// op. A batch that turns out too big for one transaction is split in halves.
func (db *DB) commit(batch []*op) {
	err := db.apply(batch)
	if err != nil {
		// Floors may have moved past entries this batch did not move after all.
		db.floors.reset()
	}
	if errors.Is(err, bdg.ErrTxnTooBig) && len(batch) > 1 {
		db.commit(batch[:len(batch)/2])
		db.commit(batch[len(batch)/2:])
		return
	}
	for _, o := range batch {
		if o.err == nil {
			o.err = err
		}
		close(o.done)
	}
}

// apply runs the ops in one transaction and commits it. Per-op logical
// errors are left in o.err; the returned error is the commit's.
func (db *DB) apply(batch []*op) error {
	txn := db.db.NewTransaction(true)
	defer txn.Discard()
	for _, o := range batch {
		o.err = nil
		if err := o.fn(txn); err != nil {
			if errors.Is(err, bdg.ErrTxnTooBig) {
				return err
			}
			o.err = err
		}
	}
	err := txn.Commit()
	if errors.Is(err, bdg.ErrDBClosed) {
		err = storage.ErrClosed
	}
	if err != nil && !errors.Is(err, bdg.ErrTxnTooBig) {
		err = fmt.Errorf("commit: %w", err)
	}
	return err
}

// badgerLogger sends Badger's own log lines to slog; its info chatter is
// debug here.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) { b.l.Error("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn("badger: " + fmt.Sprintf(f, a...))
}
func (b badgerLogger) Infof(f string, a ...any)  { b.l.Debug("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any) {}
