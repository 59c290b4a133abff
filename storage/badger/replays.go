package badger

import (
	"context"
	"errors"
	"slices"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// PutReplay creates or updates a replay job.
func (db *DB) PutReplay(ctx context.Context, job *storage.ReplayJob) error {
	v := *job
	return db.update(ctx, 512, func(txn *bdg.Txn) error { return putRecord(txn, replayKey(v.ID), &v) })
}

// CreateReplay writes a new replay job, or answers ErrConflict.
func (db *DB) CreateReplay(ctx context.Context, job *storage.ReplayJob) error {
	v := *job
	return db.update(ctx, 512, func(txn *bdg.Txn) error {
		if _, err := txn.Get(replayKey(v.ID)); err == nil {
			return storage.ErrConflict
		} else if !errors.Is(err, bdg.ErrKeyNotFound) {
			return err
		}
		return putRecord(txn, replayKey(v.ID), &v)
	})
}

// GetReplay reads one replay job.
func (db *DB) GetReplay(ctx context.Context, id string) (storage.ReplayJob, error) {
	var job storage.ReplayJob
	err := db.view(func(txn *bdg.Txn) error { return getRecord(txn, replayKey(id), &job) })
	return job, err
}

// PurgeReplays deletes the finished replay jobs last updated before
// cutoff. Nothing deleted them: every POST /replays left its job, and
// every start read them all to find the running ones.
func (db *DB) PurgeReplays(ctx context.Context, cutoff time.Time) (int, error) {
	jobs, err := db.ListReplays(ctx, "")
	if err != nil {
		return 0, err
	}
	var old []string
	for _, j := range jobs {
		if j.State != storage.ReplayRunning && j.UpdatedAt.Before(cutoff) {
			old = append(old, j.ID)
		}
	}
	total := 0
	for part := range slices.Chunk(old, 512) {
		n := 0
		err := db.updateControl(ctx, 64*len(part), func(txn *bdg.Txn) error {
			n = 0
			for _, id := range part {
				// Read again in the write: a job finished is not written
				// again, but this is cheap to be sure of.
				var j storage.ReplayJob
				switch err := getRecord(txn, replayKey(id), &j); {
				case errors.Is(err, storage.ErrNotFound):
					continue
				case err != nil:
					return err
				}
				if j.State == storage.ReplayRunning || !j.UpdatedAt.Before(cutoff) {
					continue
				}
				if err := txn.Delete(replayKey(id)); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// ListReplays returns the replay jobs in a state ("" = all), oldest first.
func (db *DB) ListReplays(ctx context.Context, state storage.ReplayState) ([]storage.ReplayJob, error) {
	// One damaged job record must not fail the listing: it stopped every
	// start's resume of the running jobs, and every sweep of old ones.
	var all []storage.ReplayJob
	err := db.view(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefixReplay, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var job storage.ReplayJob
			var bad error
			if err := it.Item().Value(func(b []byte) error { bad = decode(b, &job); return nil }); err != nil {
				return err
			}
			if bad != nil {
				db.log.Error("skipped an unreadable replay job record", "key", string(it.Item().Key()), "err", bad)
				continue
			}
			all = append(all, job)
		}
		return nil
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
