package badger

import (
	"bytes"
	"context"
	"errors"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// purgeKeyBudget bounds the keys one Purge transaction deletes. Badger
// refuses a transaction of more than ~52,000 keys (32 MiB memtable), and an
// event with many deliveries and attempts has hundreds: 256 of those in one
// transaction failed every time, and retention stopped for good. An event
// with more keys than the budget goes over several transactions.
var purgeKeyBudget = 16_384

// purgeScanBudget bounds the events one transaction of Purge looks at.
// Events kept for a fresh retry are skipped, not deleted; a transaction
// that meets many of them stops after this many, and the next one goes on
// after them.
var purgeScanBudget = 4096

// Purge deletes up to limit events received before cutoff, with their
// deliveries, outbox entries and attempts, in transactions of at most
// purgeKeyBudget keys (so it may delete fewer, but always at least one
// event when one is due). Event IDs are time-ordered, so the oldest events
// are the first keys. It returns fewer than limit only when it has finished
// a pass over the events before cutoff: a caller that stops then walks
// each kept event (below) once.
//
// An event with a live delivery whose retry budget started at or after
// cutoff (a replay or a manual retry of an old event), or at or after
// liveCutoff (an endpoint whose retry window is longer than retention), is
// kept until that delivery finishes: retention must not cut short a retry
// window it did not see start. A live delivery whose budget started
// before both does not keep its event: an endpoint disabled for the whole
// retention period loses its backlog with its events, as before.
//
// Kept events cost their deliveries' records, not their bodies. They are
// walked a window (purgeScanBudget) at a time, one transaction each, and a
// pass goes on where the last window stopped (purgeFrom), in calls to come
// too, so that a long run of kept events is not walked again by every
// call. Once a pass has reached the cutoff in every key range the next one
// starts from the beginning.
func (db *DB) Purge(ctx context.Context, cutoff, liveCutoff time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	db.purgeMu.Lock()
	defer db.purgeMu.Unlock()
	total := 0
	for {
		n, more, err := db.purgeWindow(ctx, cutoff, liveCutoff, limit-total)
		total += n
		if err != nil || !more || total >= limit {
			return total, err
		}
	}
}

// purgeWindow is one transaction of Purge; more reports that it stopped
// before the end of the pass.
func (db *DB) purgeWindow(ctx context.Context, cutoff, liveCutoff time.Time, limit int) (n int, more bool, err error) {
	if cutoff.Before(liveCutoff) {
		liveCutoff = cutoff
	}
	from := db.purgeFrom
	if from == nil {
		from = make([][]byte, len(eventPrefixes))
	}
	var next [][]byte
	stopped := false
	err = db.updateControl(ctx, 2048*limit, func(txn *bdg.Txn) error {
		// May run more than once: everything it sets starts afresh.
		n = 0
		next = make([][]byte, len(eventPrefixes))
		var dels [][]byte
		examined := 0
		stopped = false
		for pi, p := range eventPrefixes {
			if stopped {
				next[pi] = from[pi] // not reached in this call
				continue
			}
			var last []byte // the last event handled (deleted or kept)
			// Values are read only for events that go: a kept one costs
			// its deliveries' records, not its body.
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: p, PrefetchValues: false})
			for it.Seek(orKey(from[pi], p)); it.Valid(); it.Next() {
				k := it.Item().Key()
				if from[pi] != nil && bytes.Equal(k, from[pi]) {
					continue // handled by the previous call
				}
				id := string(k[len(p):])
				t, ok := storage.IDTime("evt_", id)
				if ok && !t.Before(cutoff) {
					break
				}
				if ok && t.Equal(cutoff.Truncate(time.Millisecond)) {
					// The ID has whole milliseconds: in the cutoff's, the
					// record's received_at decides (unreadable: next sweep).
					var ev storage.Event
					if err := getEvent(txn, id, &ev); err != nil || !ev.ReceivedAt.Before(cutoff) {
						continue
					}
				}
				if n >= limit || examined >= purgeScanBudget {
					stopped = true
					break
				}
				examined++
				groups, tenant, keep, err := eventDeliveryKeys(txn, id, liveCutoff)
				if err != nil {
					it.Close()
					return err
				}
				if !keep {
					size := 2 // the event and its tenant index key
					for _, g := range groups {
						size += len(g)
					}
					if n > 0 && len(dels)+size > purgeKeyBudget {
						stopped = true // the rest in the next call
						break
					}
					if size > purgeKeyBudget {
						// Too big for one transaction: whole deliveries
						// now, the event once the rest fits; of a
						// delivery too big itself, attempts first (its
						// group starts with them). The next window comes
						// back to the event (last stays before it).
						for _, g := range groups {
							if room := purgeKeyBudget - len(dels); len(g) > room {
								if len(dels) == 0 {
									dels = append(dels, g[:room]...)
								}
								break
							}
							dels = append(dels, g...)
						}
						stopped = true
						break
					}
					var ks [][]byte
					for _, g := range groups {
						ks = append(ks, g...)
					}
					dels = append(dels, it.Item().KeyCopy(nil))
					var ev storage.Event
					parted := false
					err := it.Item().Value(func(b []byte) error {
						if n, ok := eventParts(b); ok {
							parted = true
							rec, err := joinEventParts(txn, id, n)
							if err != nil {
								return err
							}
							b = rec
						}
						return decode(b, &ev)
					})
					// Its parts, found by their prefix (a damaged record's
					// own count cannot be trusted), looked for only when it
					// is parted or unreadable: an iterator per purged event
					// would cost every sweep.
					if parted || err != nil {
						dels = append(dels, eventPartKeys(txn, id)...)
					}
					switch {
					case err == nil:
						dels = append(dels, tenantEventKey(ev.Tenant, id))
					case tenant != "":
						// An unreadable record must not stop retention:
						// its tenant is its deliveries'.
						dels = append(dels, tenantEventKey(tenant, id))
					default:
						// Nor without deliveries: the tenant index keeps
						// an entry that listings skip.
						db.log.Warn("retention deleted an unreadable event record", "event", id, "err", err)
					}
					dels = append(dels, ks...)
					n++
				}
				last = it.Item().KeyCopy(last[:0])
			}
			it.Close()
			if stopped {
				next[pi] = orKey(last, from[pi])
			} else {
				next[pi] = passDone(p) // until the pass ends in every range
			}
		}
		for _, k := range dels {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	if !stopped {
		next = nil // the pass is over: the next one starts from the beginning
	}
	db.purgeFrom = next
	return n, stopped, nil
}

// passDone is a cursor past every key of prefix p: the pass is done with
// that range.
func passDone(p []byte) []byte { return append(append([]byte(nil), p...), 0xff) }

// eventDeliveryKeys lists every key that belongs to the deliveries of an
// event, a group per delivery: its attempts, its record, indexes and
// outbox entry, and last its entry in the event's index. Should an event,
// or one delivery, need several transactions, a prefix of a group goes
// first, and a later transaction finds the rest through the record and
// the index entry. keep
// reports a live delivery whose retry budget started at or after
// liveCutoff;
// then no keys are listed (the event stays). tenant is the deliveries'
// (an event's deliveries are its tenant's, but for a notice's to an
// operator's alert endpoint, of tenant ""), "" without any.
func eventDeliveryKeys(txn *bdg.Txn, evt string, liveCutoff time.Time) (groups [][][]byte, tenant string, keep bool, err error) {
	p := append(key(prefixEventDelivery, evt), sep)
	var index [][]byte
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: p, PrefetchValues: false})
	for it.Rewind(); it.Valid(); it.Next() {
		index = append(index, it.Item().KeyCopy(nil))
	}
	it.Close()
	ds := make([]storage.Delivery, len(index))
	found := make([]bool, len(index))
	for i, k := range index {
		id := string(k[len(p):])
		d, err := getDelivery(txn, id)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			continue // an index entry without a record: only it goes
		case errors.Is(err, errCodec):
			// Unreadable: its record goes too. Its other index entries
			// (by endpoint and tenant) cannot be named, and listings skip
			// them; its outbox entry leaves at the next claim or cancel.
			ds[i].ID = id
			continue
		case err != nil:
			return nil, "", false, err
		}
		if !d.State.Terminal() && !d.RetryFrom.Before(liveCutoff) {
			return nil, "", true, nil
		}
		d.ID = id
		ds[i], found[i] = d, true
		if tenant == "" {
			tenant = d.Tenant // an operator's alert delivery of a notice has tenant ""
		}
	}
	groups = make([][][]byte, len(index))
	for i, k := range index {
		var g [][]byte
		if d := &ds[i]; d.ID != "" { // readable, or unreadable with its id from the index
			ap := append(key(prefixAttempt, d.ID), sep)
			ai := txn.NewIterator(bdg.IteratorOptions{Prefix: ap, PrefetchValues: false})
			for ai.Rewind(); ai.Valid(); ai.Next() {
				g = append(g, ai.Item().KeyCopy(nil))
			}
			ai.Close()
		}
		if d := &ds[i]; found[i] {
			g = append(g, deliveryKey(d.ID), endpointDeliveryKey(d.Endpoint, d.ID), tenantDeliveryKey(d.Tenant, d.ID))
			if !d.State.Terminal() {
				g = append(g, queueKey(d.Endpoint, dueAt(d), d.ID))
			}
		}
		if !found[i] && ds[i].ID != "" {
			g = append(g, deliveryKey(ds[i].ID))
		}
		groups[i] = append(g, k)
	}
	return groups, tenant, false, nil
}

// orKey returns a unless it is nil, else b.
func orKey(a, b []byte) []byte {
	if a != nil {
		return a
	}
	return b
}
