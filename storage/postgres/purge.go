package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// purgeWindow bounds the events one transaction of Purge looks at.
const purgeWindow = 500

// sweepBatch bounds the expired dedupe and idempotency rows one Purge
// call deletes.
const sweepBatch = 5000

// purgeCursor is where a purge pass goes on: the last event it looked at,
// by (received_at, id). A pass that reaches the cutoff starts again from
// the beginning, so that an event kept for a live retry is looked at
// again once per pass, not by every call.
type purgeCursor struct {
	set bool
	at  int64
	id  string
}

// Purge deletes up to limit events received before cutoff, with their
// deliveries and attempts (ON DELETE CASCADE), keeping an event with a
// live delivery whose retry budget started at or after cutoff or
// liveCutoff. It returns fewer than limit only when a pass has gone
// through every event before cutoff. It also sweeps dedupe and admin
// Idempotency-Key rows whose window ended before cutoff: the embedded
// engine's records expire by themselves, these need deleting.
//
// Each window locks its events (FOR UPDATE SKIP LOCKED) before it checks
// their deliveries: an Enqueue of a delivery holds a share lock on its
// event (the foreign key's check) until it commits, so either the purge
// skips the event, or the Enqueue waits and then finds it gone. A single
// DELETE … WHERE NOT EXISTS would miss a delivery committed while it ran.
func (db *DB) Purge(ctx context.Context, cutoff, liveCutoff time.Time, limit int) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, nil
	}
	if cutoff.Before(liveCutoff) {
		liveCutoff = cutoff
	}
	db.purgeMu.Lock()
	defer db.purgeMu.Unlock()
	if err := db.sweepExpired(ctx, cutoff); err != nil {
		return 0, err
	}
	total := 0
	for total < limit {
		n, done, err := db.purgeOnce(ctx, nanos(cutoff), nanos(liveCutoff), min(limit-total, purgeWindow))
		total += n
		if err != nil {
			return total, db.fail("purge", err)
		}
		if done {
			db.purgeFrom = purgeCursor{}
			break
		}
	}
	return total, nil
}

// purgeOnce is one window of Purge; done reports the end of the pass.
func (db *DB) purgeOnce(ctx context.Context, cutoff, liveCutoff int64, n int) (deleted int, done bool, err error) {
	from := db.purgeFrom
	if !from.set {
		from = purgeCursor{at: -1 << 63, id: ""}
	}
	var last purgeCursor
	err = db.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, received_at FROM events
			WHERE received_at < $1 AND (received_at, id) > ($2, $3)
			ORDER BY received_at, id LIMIT $4 FOR UPDATE SKIP LOCKED`, cutoff, from.at, from.id, n)
		if err != nil {
			return err
		}
		var ids []string
		for rows.Next() {
			if err := rows.Scan(&last.id, &last.at); err != nil {
				rows.Close()
				return err
			}
			last.set = true
			ids = append(ids, last.id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		done = len(ids) < n
		if len(ids) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, `DELETE FROM events e WHERE e.id = ANY($1) AND NOT EXISTS (
			SELECT 1 FROM deliveries d WHERE d.event = e.id AND d.due IS NOT NULL AND d.retry_from >= $2)`, ids, liveCutoff)
		deleted = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, false, err
	}
	if last.set {
		db.purgeFrom = last
	}
	return deleted, done, nil
}

// sweepExpired deletes a batch of dedupe and idempotency rows that
// expired before cutoff (which lies in the past: a row it deletes would
// act as new anyway).
func (db *DB) sweepExpired(ctx context.Context, cutoff time.Time) error {
	c := nanos(cutoff)
	if _, err := db.pool.Exec(ctx, `DELETE FROM dedupe WHERE ctid IN (
		SELECT ctid FROM dedupe WHERE expires < $1 LIMIT $2)`, c, sweepBatch); err != nil {
		return db.fail("sweep expired dedupe records", err)
	}
	_, err := db.pool.Exec(ctx, `DELETE FROM idem_keys WHERE ctid IN (
		SELECT ctid FROM idem_keys WHERE expires < $1 AND coalesce(lease, 0) < $1 LIMIT $2)`, c, sweepBatch)
	return db.fail("sweep expired idempotency keys", err)
}
