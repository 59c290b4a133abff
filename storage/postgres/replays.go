package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"hookgate/storage"
)

// Replay jobs are JSON documents with their state and last update as
// columns, for the listing of running jobs and the sweep of old ones.

// CreateReplay writes a new job; ErrConflict when one has its id.
func (db *DB) CreateReplay(ctx context.Context, job *storage.ReplayJob) error {
	if err := db.check(); err != nil {
		return err
	}
	b, err := encodeJSON(job)
	if err != nil {
		return err
	}
	tag, err := db.pool.Exec(ctx, `INSERT INTO replays (id, state, updated_at, doc) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO NOTHING`, job.ID, string(job.State), nanosOrNull(job.UpdatedAt), b)
	if err != nil {
		return db.fail("create a replay", err)
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrConflict
	}
	return nil
}

// PutReplay writes a job, new or not.
func (db *DB) PutReplay(ctx context.Context, job *storage.ReplayJob) error {
	if err := db.check(); err != nil {
		return err
	}
	return db.fail("write a replay", db.inTx(ctx, func(tx pgx.Tx) error { return putReplay(ctx, tx, job) }))
}

func putReplay(ctx context.Context, tx pgx.Tx, job *storage.ReplayJob) error {
	b, err := encodeJSON(job)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO replays (id, state, updated_at, doc) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at, doc = excluded.doc`,
		job.ID, string(job.State), nanosOrNull(job.UpdatedAt), b)
	return err
}

// EnqueueReplay adds deliveries and writes the job's progress in one
// transaction: both or neither.
func (db *DB) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	if err := db.check(); err != nil {
		return err
	}
	err := db.inTx(ctx, func(tx pgx.Tx) error {
		if err := insertDeliveries(ctx, tx, ds); err != nil {
			return err
		}
		return putReplay(ctx, tx, job)
	})
	if errors.Is(err, storage.ErrNotFound) {
		return err
	}
	return db.fail("enqueue a replay", err)
}

// GetReplay reads one job.
func (db *DB) GetReplay(ctx context.Context, id string) (storage.ReplayJob, error) {
	var job storage.ReplayJob
	err := db.getDoc(ctx, "replays", id, &job)
	return job, err
}

// ListReplays returns the jobs in a state ("" = all), ordered by id. A
// job that cannot be read is skipped with an error in the log: it must
// not stop every other job's resume.
func (db *DB) ListReplays(ctx context.Context, state storage.ReplayState) ([]storage.ReplayJob, error) {
	if err := db.check(); err != nil {
		return nil, err
	}
	var w where
	if state != "" {
		w.add("state = ?", string(state))
	}
	rows, err := db.pool.Query(ctx, `SELECT id, doc FROM replays`+w.sql()+` ORDER BY id`, w.args...)
	if err != nil {
		return nil, db.fail("list replays", err)
	}
	defer rows.Close()
	var out []storage.ReplayJob
	for rows.Next() {
		var id string
		var doc []byte
		if err := rows.Scan(&id, &doc); err != nil {
			return nil, db.fail("list replays", err)
		}
		var job storage.ReplayJob
		if err := json.Unmarshal(doc, &job); err != nil {
			db.log.Error("skipped an unreadable replay job record", "replay", id, "err", err)
			continue
		}
		out = append(out, job)
	}
	return out, db.fail("list replays", rows.Err())
}

// PurgeReplays deletes the finished jobs last updated before cutoff.
func (db *DB) PurgeReplays(ctx context.Context, cutoff time.Time) (int, error) {
	if err := db.check(); err != nil {
		return 0, err
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM replays WHERE state <> $1 AND coalesce(updated_at, -9223372036854775807) < $2`,
		string(storage.ReplayRunning), nanos(cutoff))
	if err != nil {
		return 0, db.fail("purge replays", err)
	}
	return int(tag.RowsAffected()), nil
}
