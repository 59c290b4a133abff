package badger

import (
	"context"
	"errors"
	"fmt"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// dedupeRecord remembers the first answer to an inbound event ID.
type dedupeRecord struct {
	Hash     [32]byte         `json:"h"`
	Response storage.Response `json:"r"`
	Expires  time.Time        `json:"x"`
	Event    string           `json:"e"`
}

// Ingest stores an event, its deliveries and its dedupe record in one
// durable write, or answers from an existing dedupe record.
func (db *DB) Ingest(ctx context.Context, req *storage.IngestRequest) (storage.IngestResult, error) {
	k := dedupeKey(req.Key.Tenant, req.Key.Source, req.Key.EventID)
	h := db.recent.hash(k)
	if db.recent.mayContain(h) {
		// Fast path for retries: a committed record answers without a write.
		res, found, err := db.acceptFromRecord(ctx, k, req)
		if err != nil || found {
			return res, err
		}
	}
	var res storage.IngestResult
	ev, err := encode(&req.Event)
	if err != nil {
		return res, fmt.Errorf("encode event: %w", err)
	}
	dls := make([][]byte, len(req.Deliveries))
	for i := range req.Deliveries {
		if dls[i], err = encode(&req.Deliveries[i]); err != nil {
			return res, fmt.Errorf("encode delivery: %w", err)
		}
	}
	rec, err := encode(&dedupeRecord{Hash: req.BodyHash, Response: req.Response, Expires: req.DedupeUntil, Event: req.Event.ID})
	if err != nil {
		return res, fmt.Errorf("encode dedupe record: %w", err)
	}
	size := len(ev) + len(rec) + 200*len(dls)
	largest := max(len(ev), len(rec)) // the event record, whole or in parts, is at most len(ev)
	for _, d := range dls {
		largest = max(largest, len(d))
	}
	var found bool
	err = db.submit(ctx, &op{size: size, inline: largest < db.valueThreshold, done: make(chan struct{}), fn: func(txn *bdg.Txn) error {
		var err error
		res, found, err = checkDedupe(txn, k, req)
		if err != nil || found {
			return err
		}
		res = storage.IngestResult{Response: req.Response}
		e := bdg.NewEntry(k, rec)
		e.ExpiresAt = expiresAt(req.DedupeUntil)
		if err := txn.SetEntry(e); err != nil {
			return err
		}
		if err := putEvent(txn, req.Event.ID, ev); err != nil {
			return err
		}
		if err := txn.Set(tenantEventKey(req.Event.Tenant, req.Event.ID), nil); err != nil {
			return err
		}
		for i := range req.Deliveries {
			if err := db.putNewDelivery(txn, &req.Deliveries[i], dls[i]); err != nil {
				return err
			}
		}
		return nil
	}})
	if errors.Is(err, ErrNoSpace) {
		// Out of room for new writes, but a retry of a stored event needs
		// none: its answer is the stored one (or a mismatch), never a 503
		// that says nothing was accepted. The recent-key table that takes
		// retries to the read above is empty after a restart.
		if rres, found, rerr := db.acceptFromRecord(ctx, k, req); found || rerr != nil {
			return rres, rerr
		}
	}
	if err == nil || errors.Is(err, storage.ErrIdempotencyMismatch) {
		db.recent.add(h) // a retry of this key may now take the fast path
	}
	return res, err
}

// acceptFromRecord answers from a committed dedupe record, if there is one,
// without queueing a write. The record may be committed but not yet
// durable: it answers only once it is, so that no answer ever rests on
// data a crash could lose.
func (db *DB) acceptFromRecord(ctx context.Context, k []byte, req *storage.IngestRequest) (storage.IngestResult, bool, error) {
	var res storage.IngestResult
	var found bool
	err := db.view(func(txn *bdg.Txn) error {
		var err error
		res, found, err = checkDedupe(txn, k, req)
		return err
	})
	if found {
		if werr := db.waitDurable(ctx); werr != nil {
			return storage.IngestResult{}, true, werr
		}
	}
	return res, found, err
}

// checkDedupe looks up an unexpired dedupe record: found with the stored
// answer when the body hash matches, ErrIdempotencyMismatch when not.
func checkDedupe(txn *bdg.Txn, k []byte, req *storage.IngestRequest) (storage.IngestResult, bool, error) {
	item, err := txn.Get(k)
	if errors.Is(err, bdg.ErrKeyNotFound) {
		return storage.IngestResult{}, false, nil
	}
	if err != nil {
		return storage.IngestResult{}, false, err
	}
	var rec dedupeRecord
	if err := item.Value(func(v []byte) error { return decode(v, &rec) }); err != nil {
		return storage.IngestResult{}, false, fmt.Errorf("decode dedupe record: %w", err)
	}
	if !rec.Expires.IsZero() && !req.Event.ReceivedAt.Before(rec.Expires) {
		return storage.IngestResult{}, false, nil
	}
	if rec.Hash != req.BodyHash {
		return storage.IngestResult{}, true, storage.ErrIdempotencyMismatch
	}
	return storage.IngestResult{Replayed: true, Response: rec.Response}, true, nil
}

// putNewDelivery writes a delivery with its indexes and its outbox entry.
func (db *DB) putNewDelivery(txn *bdg.Txn, d *storage.Delivery, enc []byte) error {
	if err := txn.Set(deliveryKey(d.ID), enc); err != nil {
		return err
	}
	if err := txn.Set(eventDeliveryKey(d.Event, d.ID), nil); err != nil {
		return err
	}
	if err := txn.Set(endpointDeliveryKey(d.Endpoint, d.ID), nil); err != nil {
		return err
	}
	if err := txn.Set(tenantDeliveryKey(d.Tenant, d.ID), nil); err != nil {
		return err
	}
	if d.State.Terminal() {
		return nil
	}
	return db.setQueue(txn, d)
}

// setQueue writes the outbox entry of a live delivery.
func (db *DB) setQueue(txn *bdg.Txn, d *storage.Delivery) error {
	due := dueAt(d)
	db.floors.lower(d.Endpoint, due)
	return txn.Set(queueKey(d.Endpoint, due, d.ID), nil)
}

// dueAt is where a live delivery sits in its endpoint's outbox.
func dueAt(d *storage.Delivery) time.Time {
	if d.State == storage.StateDelivering {
		return d.LeaseUntil
	}
	return d.NextAttemptAt
}
