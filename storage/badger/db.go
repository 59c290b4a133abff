// Package badger is hookgate's embedded storage engine, on Badger v4.
//
// Writes are group-committed and pipelined. One writer goroutine applies
// many callers' operations in one Badger transaction and commits it to the
// memtable and its write-ahead log; a syncer goroutine then makes
// everything committed so far durable with one sync and only then releases
// the callers. While the syncer waits for the disk, the writer already
// builds the next transaction, so the disk's latency bounds neither the
// batch size nor the throughput. Having one writer also means transactions
// never conflict: an operation reads and writes without interference.
//
// The sync is the engine's own (logSyncer), not Badger's DB.Sync, which
// misses a memtable log sealed since the last sync.
//
// Nothing is released before it is durable: a caller's answer, and any
// read that could reveal not yet durable data to a caller who acts on it
// (the dedupe fast path), waits for the sync that covers it. A failed sync
// is fatal to the store (fail-stop, as after fsyncgate): every later write
// and durable read fails until a restart replays the log.
package badger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"

	"hookgate/storage"
)

var (
	_ storage.Store        = (*DB)(nil)
	_ storage.SyncReporter = (*DB)(nil)
)

// Writer batch bounds: a batch ends at whichever comes first. Badger refuses
// transactions over ~15% of a memtable, so stay well below.
const (
	maxBatchOps   = 1024
	maxBatchBytes = 4 << 20
	// syncQueue bounds how many committed batches may wait for a sync:
	// as many in the queue, and as many more taken from it while every
	// sync slot is busy. Past that the writer waits.
	syncQueue = 64
	// numMemtables is Badger's NumMemtables: the current memtable and
	// those waiting to be flushed.
	numMemtables = 3
)

// MaxInlineRecord is Badger's value threshold: a value of this size or
// more goes to Badger's value log, whose space this engine never
// reclaims. An event record up to twice that is written in parts
// (events.go), so only an event past MaxInlineBody (server.max_body raised
// above its default) goes there. The value log is not reclaimed because
// reclaiming it (RunValueLogGC) rewrites live records unsynced and deletes
// the old file at once, which a power loss could turn into lost events
// (docs/benchmarks.md, "Sustained ingest"). In an earlier version the threshold was
// 64 KiB, so every event over that leaked its space after purge; before event
// records were parted, so an incompressible body near the
// default max_body (1MiB) did.
const MaxInlineRecord = 1 << 20

// valueThreshold is Badger's value threshold for memtables of the given
// size: Badger refuses one over 15% of a memtable.
func valueThreshold(memtable int64) int64 {
	return min(MaxInlineRecord, memtable*15/100)
}

// MaxInlineBody is the largest event body whose record surely stays in
// the LSM tree: maxPartedRecord less room for its headers and ids.
const MaxInlineBody = maxPartedRecord - 64<<10

// ErrSyncFailed is returned by every write after a sync failed: the store
// no longer knows what is on disk and must be reopened.
var ErrSyncFailed = fmt.Errorf("badger: sync failed: %w", storage.ErrStoreFailed)

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
	logs   *logSyncer // only the syncer uses it
	ops    chan *op
	syncs  chan []*op
	stop   chan struct{}
	done   chan struct{}
	closed sync.Once
	log    *slog.Logger
	floors *floors
	recent *recentKeys

	// tenantIndexReady is set once every delivery has its dt: key
	// (tenantindex.go); bg runs its build.
	tenantIndexReady atomic.Bool
	bg               sync.WaitGroup

	purgeMu   sync.Mutex
	purgeFrom [][]byte // per event prefix, where the next Purge resumes
	dir       string
	lock      *os.File     // dirLock's: held until Close
	space     spaceReading // the writer's last free-space reading
	memtable  int64        // Badger's MemTableSize (space.go)
	// valueThreshold is Badger's: values this long or longer go to the
	// value log.
	valueThreshold int

	mu       sync.RWMutex // guards isClosed against sends on ops and new reads
	isClosed bool
	// reads counts views in flight: Close waits for them before closing
	// Badger. Added to only under mu while !isClosed.
	reads sync.WaitGroup

	// applying and synced count batches: started by the writer (each then
	// sent to the syncer once, failed or not), made durable by the syncer.
	// A batch is readable before its commit returns, so a reader's target
	// is applying. durable is closed and replaced after each sync.
	applying atomic.Uint64
	synced   atomic.Uint64
	syncMu   sync.Mutex
	durable  chan struct{}
	failed   atomic.Pointer[error]
	stats    syncStats
}

// op is one caller's share of a batch. fn must do all of its reads and
// checks before its first write, and return a non-nil error only before
// writing anything: the batch's transaction cannot undo one op's writes.
// fn may run more than once (a batch that grew too big is split and redone),
// so it must depend only on the transaction and its captured arguments.
type op struct {
	fn   func(txn *bdg.Txn) error
	size int // estimated bytes written
	// control marks a small write that keeps the gateway manageable (the
	// catalog, releases, cancels, purges): it goes on below the reserve
	// of data writes, down to what Badger needs to open (space.go).
	control bool
	// inline promises that every value fn writes is below Badger's value
	// threshold (DB.valueThreshold), so the op leaves the value log alone
	// and a sync that covers only inline ops need not sync it. Ops that do
	// not know their values' sizes leave it false.
	inline bool
	err    error
	done   chan struct{}
}

// Open opens (or creates) the store in dir.
func Open(dir string, o Options) (*DB, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	memtable := cmp.Or(o.MemTableSize, 32<<20)
	opts := bdg.DefaultOptions(dir).
		WithSyncWrites(false). // the syncer syncs, once per group of batches
		WithDetectConflicts(false).
		WithLogger(badgerLogger{log}).
		WithMemTableSize(memtable).
		WithBlockCacheSize(cmp.Or(o.BlockCacheSize, 64<<20)).
		WithNumMemtables(numMemtables).
		WithNumCompactors(2).
		// Badger refuses a threshold over 15% of a memtable.
		WithValueThreshold(valueThreshold(memtable))
	// Compaction builds up to a dozen tables at once, each buffered in
	// memory: with tables growing per level (the default) a large backlog
	// took gigabytes. Equal-sized tables keep that bounded.
	opts.TableSizeMultiplier = 1
	// Table blocks of 32 KiB instead of Badger's 4 KiB: an event record
	// is ~1 KiB, so small blocks held three or four, and each block costs
	// a compression call, a checksum and an index entry when flushes and
	// compactions build tables. Interleaved 10 s ingest runs: 3-5% more
	// requests per second, p99 11-12 ms against 13-15 (docs/benchmarks.md,
	// "What was changed, and what it gained").
	opts.BlockSize = 32 << 10
	// Locked before anything in dir is touched: the repair below deletes
	// files, and Badger's own lock is taken only in its Open.
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open badger at %s: %w", dir, err)
	}
	opened := false
	defer func() {
		if !opened {
			_ = lock.Close()
		}
	}()
	if err := removeEmptyLogs(dir); err != nil {
		return nil, fmt.Errorf("open badger at %s: %w", dir, err)
	}
	// Tables a crash left unfinished are deleted by Badger's open: free.
	if free, ok := freeSpace(dir); ok && free+orphanTables(dir) < openNeed(memtable) {
		return nil, fmt.Errorf("open badger at %s: %w: %d bytes free, %d needed to replay and flush its logs; make room and start again",
			dir, ErrNoSpace, free, openNeed(memtable))
	}
	bdb, err := bdg.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open badger at %s: %w", dir, err)
	}
	logs, err := newLogSyncer(dir)
	if err != nil {
		_ = bdb.Close()
		return nil, fmt.Errorf("open badger at %s: %w", dir, err)
	}
	db := &DB{
		db:       bdb,
		logs:     logs,
		ops:      make(chan *op, maxBatchOps),
		syncs:    make(chan []*op, syncQueue),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		log:      log,
		floors:   newFloors(),
		recent:   newRecentKeys(),
		durable:  make(chan struct{}),
		dir:      dir,
		lock:     lock,
		memtable: memtable,

		valueThreshold: int(valueThreshold(memtable)),
	}
	opened = true // Close releases the lock from here on
	syncDone := make(chan struct{})
	go db.syncLoop(syncDone)
	go func() {
		db.writeLoop()
		close(db.syncs)
		<-syncDone
		db.logs.close()
		close(db.done)
	}()
	if err := db.startTenantIndex(context.Background()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open badger at %s: %w", dir, err)
	}
	n, err := db.releaseStaleClaims(context.Background(), time.Now())
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("release claims of an earlier process: %w", err)
	}
	if n > 0 {
		log.Info("released deliveries claimed by an earlier process", "deliveries", n)
	}
	if n, err = db.releaseHeldKeys(context.Background()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("release claims of an earlier process: %w", err)
	}
	if n > 0 {
		log.Info("released admin idempotency keys claimed by an earlier process", "keys", n)
	}
	return db, nil
}

// lockDir takes an exclusive lock of hookgate's own on dir (a flock of
// dir/hookgate.lock, released by closing the file or by the process's
// end), creating dir if need be. A second process on a data directory in
// use is refused before it touches a file there.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "hookgate.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errors.New("the data directory is in use by another hookgate process (or another store in this one)")
		}
		return nil, fmt.Errorf("lock the data directory: %w", err)
	}
	return f, nil
}

// Dir returns the directory the store lives in.
func (db *DB) Dir() string { return db.db.Opts().Dir }

// Close stops the writer after the operations already queued, waits for
// the reads in flight, then closes Badger (which flushes and syncs). Safe
// to call more than once.
func (db *DB) Close() error {
	var err error
	db.closed.Do(func() {
		db.mu.Lock()
		db.isClosed = true
		close(db.stop)
		db.mu.Unlock()
		<-db.done
		db.bg.Wait()
		db.reads.Wait()
		err = db.closeBadger()
		_ = db.lock.Close()
	})
	return err
}

// failedCloseWait bounds the close of a store whose sync failed: Badger's
// Close flushes the memtables and retries a failed flush for ever, so on a
// disk that refuses writes it never returned, and a gateway stopping for a
// restart never exited. What was acknowledged is in the synced log, which
// the next open replays.
const failedCloseWait = 2 * time.Second

// closeBadger closes Badger, within failedCloseWait once the store failed
// (then its goroutines are left to the process's exit).
func (db *DB) closeBadger() error {
	ferr := db.failure()
	if ferr == nil {
		return db.db.Close()
	}
	done := make(chan error, 1)
	go func() { done <- db.db.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(failedCloseWait):
		return fmt.Errorf("close gave up after %v: %w", failedCloseWait, ferr)
	}
}

// Ping reports whether the store is open and accepts a durable write of
// a full-size event (1 MiB, for the free-space check).
func (db *DB) Ping(ctx context.Context) error {
	return db.update(ctx, 1<<20, func(txn *bdg.Txn) error {
		return txn.Set(keyPing, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	})
}

// update runs fn in the next batch and waits until that batch is durable.
func (db *DB) update(ctx context.Context, size int, fn func(txn *bdg.Txn) error) error {
	return db.submit(ctx, &op{fn: fn, size: size, done: make(chan struct{})})
}

// updateControl is update for a control write (op.control).
func (db *DB) updateControl(ctx context.Context, size int, fn func(txn *bdg.Txn) error) error {
	return db.submit(ctx, &op{fn: fn, size: size, control: true, done: make(chan struct{})})
}

// submit queues o and waits until it is durable (or failed).
func (db *DB) submit(ctx context.Context, o *op) error {
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

// view runs fn in a read-only snapshot. Close waits for views in flight
// before it closes Badger, after the writer has stopped: an fn that waits
// on the writer (as waitDurable does) cannot hold Close up for ever.
func (db *DB) view(fn func(txn *bdg.Txn) error) error {
	db.mu.RLock()
	if db.isClosed {
		db.mu.RUnlock()
		return storage.ErrClosed
	}
	db.reads.Add(1)
	db.mu.RUnlock()
	defer db.reads.Done()
	err := db.db.View(fn)
	if errors.Is(err, bdg.ErrDBClosed) {
		return storage.ErrClosed
	}
	return err
}

// writeLoop owns all writes. It drains queued ops into batches until stop,
// then finishes what is queued (senders cannot add more once isClosed).
func (db *DB) writeLoop() {
	batch := make([]*op, 0, 16)
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
		// The syncer owns the old batch. Most batches hold a few ops:
		// a small one grows as needed (a full-size one per batch was a
		// tenth of the gateway's allocated bytes under load).
		batch = make([]*op, 0, 16)
	}
}

// commit applies a batch in one transaction and hands it to the syncer,
// which releases its ops once it is durable. Ops whose batch failed are
// released at once with the error. A batch that turns out too big for one
// transaction is split in halves.
func (db *DB) commit(batch []*op) {
	size, control := 0, true
	for _, o := range batch {
		size += o.size
		control = control && o.control
	}
	if err := db.checkSpace(size, control); err != nil {
		// Refused for space: the control writes in it may still go.
		var ctl, data []*op
		for _, o := range batch {
			if o.control {
				ctl = append(ctl, o)
			} else {
				data = append(data, o)
			}
		}
		release(data, err)
		if len(ctl) == 0 || len(data) == 0 {
			release(ctl, err)
			return
		}
		db.commit(ctl)
		return
	}
	db.applying.Add(1)
	err := db.apply(batch)
	if err != nil {
		// Floors may have moved past entries this batch did not move after all.
		db.floors.reset()
		// A reader may have taken this batch into its target: let a sync
		// run so that synced passes it.
		db.syncs <- nil
	}
	if errors.Is(err, bdg.ErrTxnTooBig) && len(batch) > 1 {
		db.commit(batch[:len(batch)/2])
		db.commit(batch[len(batch)/2:])
		return
	}
	if err != nil {
		release(batch, err)
		return
	}
	db.syncs <- batch
}

// release signals each op of a batch, with err where the op has none.
func release(batch []*op, err error) {
	for _, o := range batch {
		if o.err == nil {
			o.err = err
		}
		close(o.done)
	}
}

// syncLoop makes committed batches durable and releases their ops, in
// the order committed. A sync covers every batch committed before it
// started; up to syncSlots run at once, so a batch committed while one
// runs need not wait for it to end before its own starts (a request
// waited for one and a half syncs on average with one at a time).
func (db *DB) syncLoop(done chan struct{}) {
	defer close(done)
	var (
		// received counts the batches received: the writer sends each
		// batch once, in order, so these are the first applied. In an
		// earlier version synced was the writer's count of batches committed,
		// read after the drain: a batch counted but not yet sent was
		// taken as synced without its value log (mayWriteValues saw only
		// the group).
		received uint64
		// started counts the runs started. Runs are released in the order
		// started, at most syncSlots in flight, so run n may use slot
		// n % syncSlots: the run before it in that slot was released.
		started uint64
		pending [][]*op
		flight  []*syncRun // in the order started
		results = make(chan *syncRun, syncSlots)
		syncs   = db.syncs // nil once closed
	)
	take := func(b []*op, ok bool) {
		if !ok {
			syncs = nil
			return
		}
		pending = append(pending, b)
	}
	for {
		// Take what else is queued into the same sync.
	drain:
		for syncs != nil && len(pending) < syncQueue {
			select {
			case b, ok := <-syncs:
				take(b, ok)
			default:
				break drain
			}
		}
		if syncs == nil && len(pending) == 0 && len(flight) == 0 {
			return // closed, and everything released
		}
		if len(pending) > 0 && len(flight) < syncSlots {
			received += uint64(len(pending))
			r := db.startSync(pending, received, int(started%syncSlots), results)
			started++
			flight = append(flight, r)
			pending = nil
			if r.finished {
				flight = db.releaseSynced(flight)
			}
			continue
		}
		in := syncs
		if len(pending) >= syncQueue {
			in = nil // every slot busy and a sync's worth waiting
		}
		select {
		case b, ok := <-in:
			take(b, ok)
		case r := <-results:
			db.logs.finish(r.plan, r.err)
			if r.err != nil {
				r.err = db.fail(r.err)
			}
			r.finished = true
			flight = db.releaseSynced(flight)
		}
	}
}

// A syncRun is one sync in flight and the batches it makes durable.
type syncRun struct {
	group    [][]*op
	received uint64 // batches received up to this run's last
	plan     *syncPlan
	start    time.Time
	took     time.Duration
	err      error
	finished bool
}

// startSync plans a sync of group and runs it on its own goroutine,
// which sends the run to results when done. A store that failed, or a
// plan that failed, gives a run finished at once.
func (db *DB) startSync(group [][]*op, received uint64, slot int, results chan<- *syncRun) *syncRun {
	r := &syncRun{group: group, received: received, start: time.Now()}
	if err := db.failure(); err != nil {
		r.err, r.finished = err, true
		return r
	}
	plan, err := db.logs.plan(mayWriteValues(group), slot)
	if err != nil {
		r.err, r.finished = db.fail(err), true
		return r
	}
	r.plan = plan
	go func() {
		r.err = plan.run()
		r.took = time.Since(r.start)
		results <- r
	}()
	return r
}

// releaseSynced releases the finished runs at the head of flight, in
// order, and returns what is left in flight. A run released after the
// store failed fails too, even if its own sync succeeded: the failure may
// have been reported to another slot's sync for pages this run counted on.
func (db *DB) releaseSynced(flight []*syncRun) []*syncRun {
	for len(flight) > 0 && flight[0].finished {
		r := flight[0]
		flight = flight[1:]
		err := r.err
		if err == nil {
			err = db.failure()
		}
		if err == nil {
			// Counted before the callers return: a caller then sees its
			// own write in SyncStats.
			writes := 0
			for _, b := range r.group {
				writes += len(b)
			}
			db.stats.observe(r.took, writes)
		}
		for _, b := range r.group {
			release(b, err)
		}
		if err == nil {
			db.synced.Store(r.received)
		}
		db.syncMu.Lock()
		close(db.durable)
		db.durable = make(chan struct{})
		db.syncMu.Unlock()
	}
	return flight
}

// mayWriteValues reports whether a group of batches may have written to
// Badger's value log: a nil batch (a failed commit's marker) or an op
// that is not inline may have.
func mayWriteValues(group [][]*op) bool {
	for _, b := range group {
		if b == nil {
			return true
		}
		for _, o := range b {
			if !o.inline {
				return true
			}
		}
	}
	return false
}

// fail latches a sync's failure: it is fatal to the store, every later
// write is refused until a restart (the page cache may have dropped what
// it could not write). It returns the error writes are answered with.
func (db *DB) fail(err error) error {
	if prev := db.failure(); prev != nil {
		return prev // latched already: writes are answered with the first failure
	}
	werr := fmt.Errorf("%w: %v", ErrSyncFailed, err)
	if db.failed.CompareAndSwap(nil, &werr) {
		db.log.Error("badger sync failed: refusing further writes until restart", "err", err)
		return werr
	}
	return db.failure()
}

func (db *DB) failure() error {
	if p := db.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// waitDurable returns once everything committed before the call is
// durable: a caller that read data (say a dedupe record) may act on it.
// The target counts the batch being committed too: its writes may be
// visible before its commit returns.
func (db *DB) waitDurable(ctx context.Context) error {
	target := db.applying.Load()
	for db.synced.Load() < target {
		if err := db.failure(); err != nil {
			return err
		}
		db.syncMu.Lock()
		ch := db.durable
		db.syncMu.Unlock()
		if db.synced.Load() >= target {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-db.done:
			return storage.ErrClosed
		}
	}
	return db.failure()
}

// apply runs the ops in one transaction and commits it. Per-op logical
// errors are left in o.err; the returned error is the commit's.
func (db *DB) apply(batch []*op) error {
	if err := db.failure(); err != nil {
		return err
	}
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

// syncStats counts the syncer's work for SyncStats. Only the syncer
// writes; readers may run at any time, and see whole syncs: a scrape must
// never show a bucket above the count (Prometheus histograms are
// cumulative, and +Inf is the count).
type syncStats struct {
	mu      sync.Mutex
	syncs   uint64
	nanos   uint64
	writes  uint64
	buckets [len(storage.SyncBounds)]uint64 // per bound, not cumulative
}

func (s *syncStats) observe(d time.Duration, writes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range storage.SyncBounds {
		if d.Seconds() <= b {
			s.buckets[i]++
			break
		}
	}
	s.nanos += uint64(d)
	s.writes += uint64(writes)
	s.syncs++
}

// SyncStats reports the syncs since Open (storage.SyncReporter).
func (db *DB) SyncStats() storage.SyncStats {
	s := &db.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	st := storage.SyncStats{
		Syncs:   s.syncs,
		Seconds: time.Duration(s.nanos).Seconds(),
		Writes:  s.writes,
		Buckets: make([]uint64, 0, len(s.buckets)),
	}
	var sum uint64
	for _, n := range s.buckets {
		sum += n
		st.Buckets = append(st.Buckets, sum)
	}
	return st
}
