package badger

import (
	"context"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// PutReplay creates or updates a replay job.
func (db *DB) PutReplay(ctx context.Context, job *storage.ReplayJob) error {
	v := *job
	return db.update(ctx, 512, func(txn *bdg.Txn) error { return putRecord(txn, replayKey(v.ID), &v) })
}

// GetReplay reads one replay job.
func (db *DB) GetReplay(ctx context.Context, id string) (storage.ReplayJob, error) {
	var job storage.ReplayJob
	err := db.view(func(txn *bdg.Txn) error { return getRecord(txn, replayKey(id), &job) })
	return job, err
}

// ListReplays returns the replay jobs in a state ("" = all), oldest first.
func (db *DB) ListReplays(ctx context.Context, state storage.ReplayState) ([]storage.ReplayJob, error) {
	var all []storage.ReplayJob
	err := db.view(func(txn *bdg.Txn) error {
		return scanRecords(txn, prefixReplay, func() any {
			all = append(all, storage.ReplayJob{})
			return &all[len(all)-1]
		})
	})
	if err != nil || state == "" {
		return all, err
	}
	out := all[:0]
	for _, j := range all {
		if j.State == state {
			out = append(out, j)
		}
	}
	return out, nil
}
