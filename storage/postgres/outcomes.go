package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// Attempts end one by one, each with an outcome to write, and a commit
// per outcome made the database's commits the cost of a delivery. So
// outcomes are written in groups: the first writer of a group runs the
// statements of every outcome queued meanwhile in one transaction (sent
// as one pipelined batch) and commits once; each Complete returns when its
// group has committed, with its own statement's result. Groups are written
// by up to outcomeWriters goroutines at once, started when outcomes are
// queued and ended when the queue is empty, so a group's commit never
// waits for the one before it.

const (
	// outcomeWriters is how many outcome groups may be written at once.
	outcomeWriters = 4
	// maxOutcomeGroup bounds the outcomes of one transaction.
	maxOutcomeGroup = 256
	// outcomeWriteTimeout bounds a group's transaction: its writer's
	// context is one of many waiting, so its own cancellation does not end
	// the others' writes.
	outcomeWriteTimeout = 10 * time.Second
)

// outcomeWrite is one queued outcome and, once written, its result.
type outcomeWrite struct {
	delivery string
	sql      string
	args     []any
	err      error
	done     chan struct{}
}

// outcomeGroups queues outcomes and writes them in groups.
type outcomeGroups struct {
	mu      sync.Mutex
	queue   []*outcomeWrite
	writers int            // goroutines writing groups
	wg      sync.WaitGroup // them, for Close
}

// write queues w and returns its result once the group it went into has
// committed (or failed).
func (g *outcomeGroups) write(ctx context.Context, db *DB, w *outcomeWrite) error {
	w.done = make(chan struct{})
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if g.writers < outcomeWriters {
		g.writers++
		g.wg.Add(1)
		go g.writeGroups(db)
	}
	g.mu.Unlock()
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		// Its group may still commit it; the caller treats the outcome
		// as unknown, as after any failed write (the lease decides).
		return db.fail("complete", ctx.Err())
	}
}

// writeGroups writes queued groups until the queue is empty.
func (g *outcomeGroups) writeGroups(db *DB) {
	defer g.wg.Done()
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxOutcomeGroup)
		if n == 0 {
			g.writers--
			g.mu.Unlock()
			return
		}
		group := slices.Clone(g.queue[:n])
		g.queue = slices.Delete(g.queue, 0, n)
		g.mu.Unlock()
		db.writeOutcomes(group)
		for _, w := range group {
			close(w.done)
		}
	}
}

// writeOutcomes runs a group's statements in one transaction, in the
// order of their deliveries' ids (so that two groups lock rows in the same
// order). If the transaction fails on a statement, each is written again
// in a transaction of its own: one outcome's failure is not the others'.
func (db *DB) writeOutcomes(group []*outcomeWrite) {
	slices.SortFunc(group, func(a, b *outcomeWrite) int { return strings.Compare(a.delivery, b.delivery) })
	ctx, cancel := context.WithTimeout(context.Background(), outcomeWriteTimeout)
	defer cancel()
	if len(group) == 1 {
		group[0].err = db.writeOutcome(ctx, db.pool, group[0])
		return
	}
	counts := make([]int, len(group))
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		for _, w := range group {
			b.Queue(w.sql, w.args...)
		}
		br := tx.SendBatch(ctx, b)
		for i := range group {
			if err := br.QueryRow().Scan(&counts[i]); err != nil {
				_ = br.Close()
				return err
			}
		}
		return br.Close()
	})
	if err == nil {
		for i, w := range group {
			if counts[i] == 0 {
				w.err = storage.ErrLeaseLost
			}
		}
		return
	}
	if errors.Is(err, context.DeadlineExceeded) || db.closed.Load() {
		for _, w := range group {
			w.err = db.fail("complete", err)
		}
		return
	}
	for _, w := range group {
		w.err = db.writeOutcome(ctx, db.pool, w)
	}
}

// writeOutcome runs one outcome's statement on its own.
func (db *DB) writeOutcome(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, w *outcomeWrite) error {
	var n int
	if err := q.QueryRow(ctx, w.sql, w.args...).Scan(&n); err != nil {
		return db.fail("complete", err)
	}
	if n == 0 {
		return storage.ErrLeaseLost
	}
	return nil
}
