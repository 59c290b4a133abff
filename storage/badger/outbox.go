package badger

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Claim leases up to limit due deliveries of one endpoint.
func (db *DB) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	// More would not fit in one transaction (Badger refuses ~17,000 with
	// its default memtables).
	limit = min(limit, storage.MaxClaim)
	var claimed []storage.Delivery
	until := now.Add(lease)
	err := db.update(ctx, 256*limit, func(txn *bdg.Txn) error {
		claimed = claimed[:0]
		due, rest, err := scanDue(txn, endpoint, db.floors.get(endpoint), now, limit)
		if err != nil {
			return err
		}
		var stale [][]byte
		var ds []storage.Delivery
		for _, q := range due {
			d, err := getDelivery(txn, q.id)
			switch {
			case errors.Is(err, storage.ErrNotFound):
				stale = append(stale, q.key)
			case errors.Is(err, errCodec):
				// Unreadable: as the oldest due entry it would fail
				// every claim of the endpoint. It cannot be sent (its
				// event and attempt count are unknown), so it leaves
				// the outbox; the record stays for inspection until
				// retention removes it.
				db.log.Error("an unreadable delivery record left the outbox", "delivery", q.id, "endpoint", endpoint, "err", err)
				stale = append(stale, q.key)
			case err != nil:
				return err
			case d.State.Terminal() || dueNanos(dueAt(&d)) != dueNanos(q.due):
				// The record moved on. (Compared as keys store them: a
				// due time before 1970 is kept at 0.)
				stale = append(stale, q.key)
			default:
				ds = append(ds, d)
			}
		}
		// All reads done: now the writes.
		for _, k := range stale {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		next := rest // the first live entry this claim leaves behind
		for i := range ds {
			d := &ds[i]
			old := queueKey(d.Endpoint, d.NextAttemptAt, d.ID)
			if d.State == storage.StateDelivering {
				old = queueKey(d.Endpoint, d.LeaseUntil, d.ID)
			}
			d.State = storage.StateDelivering
			d.LeaseUntil = until
			d.UpdatedAt = now
			if err := db.moveQueue(txn, d, old); err != nil {
				return err
			}
			next = min(next, dueNanos(until))
			claimed = append(claimed, *d)
		}
		db.floors.set(endpoint, next)
		return nil
	})
	if err != nil || len(claimed) == 0 {
		return nil, err // in an earlier version, an error was reported as nothing due
	}
	jobs := make([]storage.Job, 0, len(claimed))
	var unreadable []storage.Delivery
	err = db.view(func(txn *bdg.Txn) error {
		for _, d := range claimed {
			var ev storage.Event
			err := getEvent(txn, d.Event, &ev)
			if errors.Is(err, storage.ErrNotFound) {
				continue // purged, with its delivery, since the claim
			}
			if err != nil {
				db.log.Error("delivery failed: its event record cannot be read", "delivery", d.ID, "event", d.Event, "err", err)
				unreadable = append(unreadable, d)
				continue
			}
			jobs = append(jobs, storage.Job{Delivery: d, Event: ev})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// One unreadable record must not hold back the others (as the oldest
	// due delivery it would be in every claim), nor be claimed and skipped
	// for ever: it fails, with an attempt that says why.
	for _, d := range unreadable {
		err := db.Complete(ctx, &storage.Outcome{
			Delivery: d.ID, Lease: d.LeaseUntil, State: storage.StateFailed, CountAttempt: true,
			Attempt: storage.Attempt{N: d.AttemptCount + 1, At: now, Error: "the event's stored record cannot be read"},
		})
		if err != nil && !errors.Is(err, storage.ErrLeaseLost) {
			// Left claimed: it is due again when its lease ends.
			db.log.Error("record a delivery failed", "delivery", d.ID, "err", err)
		}
	}
	return jobs, nil
}

type dueEntry struct {
	key []byte
	due time.Time
	id  string
}

// scanDue lists up to limit outbox entries of endpoint due at or before
// now, starting at the floor from (Unix ns). rest is a lower bound of the
// due time of the entries after them (noneLeft when there are none).
//
// It iterates over deletion markers too and stops at the first key due
// after now, live or deleted: otherwise every scan would walk the markers
// that completed deliveries leave at their lease expiry (a minute of
// deliveries, hundreds of thousands under load) to find the next live one.
func scanDue(txn *bdg.Txn, endpoint string, from int64, now time.Time, limit int) (out []dueEntry, rest int64, err error) {
	p := queuePrefix(endpoint)
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: p, AllVersions: true})
	defer it.Close()
	rest = noneLeft
	var last []byte
	for it.Seek(queueSeek(endpoint, from)); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()
		if last != nil && bytes.Equal(k, last) {
			continue // an older version of a key already seen
		}
		last = append(last[:0], k...)
		due, id, ok := parseQueueKey(p, k)
		if !ok {
			continue
		}
		if due.After(now) || len(out) == limit {
			rest = dueNanos(due)
			break
		}
		if item.IsDeletedOrExpired() {
			continue
		}
		out = append(out, dueEntry{key: append([]byte(nil), k...), due: due, id: id})
	}
	return out, rest, nil
}

// moveQueue writes d and moves its outbox entry from old (nil = none) to
// where d now belongs (none once terminal).
func (db *DB) moveQueue(txn *bdg.Txn, d *storage.Delivery, old []byte) error {
	if old != nil {
		if err := txn.Delete(old); err != nil {
			return err
		}
	}
	if err := putRecord(txn, deliveryKey(d.ID), d); err != nil {
		return err
	}
	if d.State.Terminal() {
		return nil
	}
	return db.setQueue(txn, d)
}

// NextDue returns the earliest outbox time of an endpoint, or an earlier
// one: like scanDue it stops at the first key after the floor, live or
// deleted, so a caller may wake early and claim nothing (which moves the
// floor past the markers).
func (db *DB) NextDue(ctx context.Context, endpoint string) (time.Time, bool, error) {
	var due time.Time
	var ok bool
	err := db.view(func(txn *bdg.Txn) error {
		p := queuePrefix(endpoint)
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: p, AllVersions: true})
		defer it.Close()
		for it.Seek(queueSeek(endpoint, db.floors.get(endpoint))); it.Valid(); it.Next() {
			if due, _, ok = parseQueueKey(p, it.Item().Key()); ok {
				return nil
			}
		}
		return nil
	})
	return due, ok, err
}

// Depth counts an endpoint's live outbox entries and the due ones, each up
// to limit, with a key-only scan from the floor.
func (db *DB) Depth(ctx context.Context, endpoint string, now time.Time, limit int) (live, due int, err error) {
	err = db.view(func(txn *bdg.Txn) error {
		p := queuePrefix(endpoint)
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: p})
		defer it.Close()
		seek := binary.BigEndian.AppendUint64(append([]byte(nil), p...), uint64(db.floors.get(endpoint)))
		for it.Seek(seek); it.Valid() && live < limit; it.Next() {
			t, _, ok := parseQueueKey(p, it.Item().Key())
			if !ok {
				continue
			}
			live++
			if !t.After(now) {
				due++
			}
		}
		return nil
	})
	return live, due, err
}

// Complete records an attempt and the delivery's next state.
func (db *DB) Complete(ctx context.Context, out *storage.Outcome) error {
	att, err := json.Marshal(&out.Attempt)
	if err != nil {
		return fmt.Errorf("encode attempt: %w", err)
	}
	// The circuit notices are a Gates store's; this engine keeps no circuit.
	ns := make([]*storage.Notice, len(out.Notices))
	for i := range out.Notices {
		ns[i] = &out.Notices[i]
	}
	notices, size, err := encodeNotices(ns...)
	if err != nil {
		return err
	}
	return db.update(ctx, 512+len(att)+size, func(txn *bdg.Txn) error {
		d, err := getDelivery(txn, out.Delivery)
		if errors.Is(err, storage.ErrNotFound) {
			return storage.ErrLeaseLost // purged (or never there): not held
		}
		if err != nil {
			return err
		}
		if d.State != storage.StateDelivering || !d.LeaseUntil.Equal(out.Lease) {
			return storage.ErrLeaseLost
		}
		old := queueKey(d.Endpoint, d.LeaseUntil, d.ID)
		if out.CountAttempt {
			d.AttemptCount++
		}
		d.State = out.State
		d.LeaseUntil = time.Time{}
		d.NextAttemptAt = out.NextAttemptAt
		d.Interval = out.Interval
		d.LastError = out.Attempt.Error
		d.LastStatus = out.Attempt.StatusCode
		d.UpdatedAt = out.Attempt.At
		n := out.Attempt.N
		if err := txn.Set(attemptKey(d.ID, n), att); err != nil {
			return err
		}
		if err := putEndpointHold(txn, d.Endpoint, out.Hold, out.HoldURL, out.EndHold); err != nil {
			return err
		}
		if err := db.putNotices(txn, notices); err != nil {
			return err
		}
		return db.moveQueue(txn, &d, old)
	})
}

// endpointHold is a receiver's pause (storage.Outcome.Hold).
type endpointHold struct {
	Until time.Time `json:"u"`
	URL   string    `json:"url"`
}

// putEndpointHold keeps the later of an endpoint's stored hold and until
// (none when until is zero); a hold asked by another URL is replaced.
// end deletes it (Outcome.EndHold).
func putEndpointHold(txn *bdg.Txn, endpoint string, until time.Time, url string, end bool) error {
	k := endpointHoldKey(endpoint)
	if end {
		return txn.Delete(k)
	}
	if until.IsZero() {
		return nil
	}
	// A hold that cannot be read is replaced: it must never keep an
	// outcome from being recorded.
	var old endpointHold
	if err := getRecord(txn, k, &old); err == nil && old.URL == url && !until.After(old.Until) {
		return nil
	}
	return putRecordUntil(txn, k, &endpointHold{Until: until, URL: url}, until)
}

// EndpointHold reads an endpoint's stored pause (storage.Outbox).
func (db *DB) EndpointHold(ctx context.Context, endpoint string, now time.Time) (time.Time, string, error) {
	var h endpointHold
	err := db.view(func(txn *bdg.Txn) error { return getRecord(txn, endpointHoldKey(endpoint), &h) })
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return time.Time{}, "", nil
	case err != nil:
		return time.Time{}, "", err
	case !h.Until.After(now):
		return time.Time{}, "", nil
	}
	return h.Until, h.URL, nil
}

// Release returns claimed deliveries to pending without an attempt.
func (db *DB) Release(ctx context.Context, ids []string, lease, due time.Time) error {
	return db.updateControl(ctx, 256*len(ids), func(txn *bdg.Txn) error {
		var moves []storage.Delivery
		for _, id := range ids {
			d, err := getDelivery(txn, id)
			if errors.Is(err, storage.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if d.State == storage.StateDelivering && d.LeaseUntil.Equal(lease) {
				moves = append(moves, d)
			}
		}
		for i := range moves {
			d := &moves[i]
			old := queueKey(d.Endpoint, d.LeaseUntil, d.ID)
			d.State = storage.StatePending
			d.LeaseUntil = time.Time{}
			if !due.IsZero() {
				d.NextAttemptAt = due
			}
			if err := db.moveQueue(txn, d, old); err != nil {
				return err
			}
		}
		return nil
	})
}

// Enqueue adds new deliveries of stored events.
func (db *DB) Enqueue(ctx context.Context, ds []storage.Delivery) error {
	return db.enqueue(ctx, nil, ds)
}

// EnqueueReplay adds new deliveries of stored events and writes a replay
// job's progress, in one transaction.
func (db *DB) EnqueueReplay(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	return db.enqueue(ctx, job, ds)
}

// enqueue writes ds, and job unless it is nil, in one transaction.
func (db *DB) enqueue(ctx context.Context, job *storage.ReplayJob, ds []storage.Delivery) error {
	var jobRec []byte
	if job != nil {
		var err error
		if jobRec, err = encode(job); err != nil {
			return fmt.Errorf("encode replay: %w", err)
		}
	}
	encs := make([][]byte, len(ds))
	size := len(jobRec)
	for i := range ds {
		var err error
		if encs[i], err = encode(&ds[i]); err != nil {
			return fmt.Errorf("encode delivery: %w", err)
		}
		size += len(encs[i]) + 200
	}
	return db.update(ctx, size, func(txn *bdg.Txn) error {
		for i := range ds {
			ok, err := hasEvent(txn, ds[i].Event)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("event %s: %w", ds[i].Event, storage.ErrNotFound)
			}
		}
		for i := range ds {
			if err := db.putNewDelivery(txn, &ds[i], encs[i]); err != nil {
				return err
			}
		}
		if job != nil {
			return txn.Set(replayKey(job.ID), jobRec)
		}
		return nil
	})
}

// Retry makes a delivery due now with a fresh retry budget.
func (db *DB) Retry(ctx context.Context, id string, now time.Time) (storage.Delivery, error) {
	var out storage.Delivery
	err := db.update(ctx, 512, func(txn *bdg.Txn) error {
		d, err := getDelivery(txn, id)
		if err != nil {
			return err
		}
		if d.State == storage.StateCancelled {
			return fmt.Errorf("delivery %s is cancelled: %w", id, storage.ErrConflict)
		}
		if d.State == storage.StateDelivering && now.Before(d.LeaseUntil) {
			// Its attempt would lose its lease and go unrecorded, and the
			// receiver would get two requests with the same attempt number.
			return fmt.Errorf("delivery %s is being delivered: %w", id, storage.ErrConflict)
		}
		var old []byte
		if !d.State.Terminal() {
			old = queueKey(d.Endpoint, dueAt(&d), d.ID)
		}
		d.State = storage.StatePending
		d.LeaseUntil = time.Time{}
		d.NextAttemptAt = now
		d.RetryFrom = now
		d.RetryBase = d.AttemptCount
		d.Interval = 0
		d.UpdatedAt = now
		out = d
		return db.moveQueue(txn, &d, old)
	})
	return out, err
}

// CancelEndpoint cancels the live deliveries of an endpoint, in chunks so
// that a large backlog never makes one transaction too big.
func (db *DB) CancelEndpoint(ctx context.Context, endpoint string) (int, error) {
	total := 0
	for {
		n := 0
		err := db.updateControl(ctx, 256*512, func(txn *bdg.Txn) error {
			n = 0
			due, _, err := scanDue(txn, endpoint, 0, time.Unix(0, 1<<62), 512)
			if err != nil {
				return err
			}
			var moves []storage.Delivery
			for _, q := range due {
				d, err := getDelivery(txn, q.id)
				switch {
				case errors.Is(err, storage.ErrNotFound), errors.Is(err, errCodec):
					d = storage.Delivery{} // only its entry goes (a damaged record may decode in part)
				case err != nil:
					return err
				}
				moves = append(moves, d)
			}
			for i, q := range due {
				if err := txn.Delete(q.key); err != nil {
					return err
				}
				d := &moves[i]
				if d.ID == "" || d.State.Terminal() {
					continue
				}
				d.State = storage.StateCancelled
				d.LeaseUntil = time.Time{}
				d.UpdatedAt = time.Now().UTC()
				if err := putRecord(txn, deliveryKey(d.ID), d); err != nil {
					return err
				}
				n++
			}
			if len(due) == 0 {
				n = -1
				db.floors.forget(endpoint) // an absent floor scans from the front
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		if n < 0 {
			return total, nil
		}
		total += n
	}
}

// QueuedEndpoints lists the endpoints with outbox entries, seeking past
// each endpoint's entries to the next endpoint.
func (db *DB) QueuedEndpoints(ctx context.Context) ([]string, error) {
	var ids []string
	err := db.view(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefixQueue})
		defer it.Close()
		for it.Seek(prefixQueue); it.Valid(); {
			if err := ctx.Err(); err != nil {
				return err
			}
			rest := it.Item().Key()[len(prefixQueue):]
			i := bytes.IndexByte(rest, sep)
			if i < 0 { // not a queue key of this engine's making
				it.Next()
				continue
			}
			ids = append(ids, string(rest[:i]))
			it.Seek(append(key(prefixQueue, string(rest[:i])), sep+1))
		}
		return nil
	})
	return ids, err
}

func getDelivery(txn *bdg.Txn, id string) (storage.Delivery, error) {
	var d storage.Delivery
	err := getRecord(txn, deliveryKey(id), &d)
	return d, err
}

// getRecord decodes the value at k into v; ErrNotFound when absent.
func getRecord(txn *bdg.Txn, k []byte, v any) error {
	item, err := txn.Get(k)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return storage.ErrNotFound
	}
	if err != nil {
		return err
	}
	return item.Value(func(b []byte) error { return decode(b, v) })
}

// putRecord encodes v at k.
func putRecord(txn *bdg.Txn, k []byte, v any) error {
	b, err := encode(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", k[:2], err)
	}
	return txn.Set(k, b)
}
