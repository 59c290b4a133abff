package badger

import (
	"bytes"
	"context"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// purgeKeyBudget bounds the keys one Purge deletes. Badger refuses a
// transaction of more than ~52,000 keys (32 MiB memtable), and an event
// with many deliveries and attempts has hundreds: 256 of those in one
// transaction failed every time, and retention stopped for good.
const purgeKeyBudget = 16_384

// purgeScanBudget bounds the events one Purge looks at. Events kept for a
// fresh retry are skipped, not deleted; a call that meets many of them
// stops after this many and the next call goes on after them.
var purgeScanBudget = 4096

// Purge deletes up to limit events received before cutoff, with their
// deliveries, outbox entries and attempts, in one transaction of at most
// purgeKeyBudget keys (so it may delete fewer, but always at least one
// event when one is due and the scan reaches it). Event IDs are
// time-ordered, so the oldest events are the first keys.
//
// An event with a live delivery whose retry budget started at or after
// cutoff (a replay or a manual retry of an old event) is kept until that
// delivery finishes: retention must not cut short a retry window it did
// not see start (the gateway keeps every retry window within retention).
// A live delivery whose budget started before cutoff does not keep its
// event: an endpoint disabled for the whole retention period loses its
// backlog with its events, as before.
//
// Calls resume where the previous one stopped (purgeFrom), so that kept
// events at the head are not walked by every call; a call that reaches
// the cutoff starts the next one from the beginning again.
func (db *DB) Purge(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	db.purgeMu.Lock()
	defer db.purgeMu.Unlock()
	from := db.purgeFrom
	if from == nil {
		from = make([][]byte, len(eventPrefixes))
	}
	var next [][]byte
	n := 0
	err := db.update(ctx, 2048*limit, func(txn *bdg.Txn) error {
		// May run more than once: everything it sets starts afresh.
		n = 0
		next = make([][]byte, len(eventPrefixes))
		var dels [][]byte
		examined, stopped := 0, false
		for pi, p := range eventPrefixes {
			if stopped {
				next[pi] = from[pi] // not reached in this call
				continue
			}
			var last []byte // the last event handled (deleted or kept)
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: p})
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
				if n >= limit || examined >= purgeScanBudget {
					stopped = true
					break
				}
				examined++
				var ev storage.Event
				if err := it.Item().Value(func(b []byte) error { return decode(b, &ev) }); err != nil {
					it.Close()
					return err
				}
				ev.ID = id
				ks, keep, err := eventDeliveryKeys(txn, ev.ID, cutoff)
				if err != nil {
					it.Close()
					return err
				}
				if !keep {
					if n > 0 && len(dels)+len(ks)+2 > purgeKeyBudget {
						stopped = true // the rest in the next call
						break
					}
					dels = append(dels, it.Item().KeyCopy(nil), tenantEventKey(ev.Tenant, ev.ID))
					dels = append(dels, ks...)
					n++
				}
				last = it.Item().KeyCopy(last[:0])
			}
			it.Close()
			if stopped {
				next[pi] = orKey(last, from[pi])
			}
		}
		for _, k := range dels {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		db.purgeFrom = next
	}
	return n, err
}

// eventDeliveryKeys lists every key that belongs to the deliveries of an
// event: indexes, records, outbox entries and attempts. keep reports a
// live delivery whose retry budget started at or after cutoff.
func eventDeliveryKeys(txn *bdg.Txn, evt string, cutoff time.Time) (keys [][]byte, keep bool, err error) {
	p := append(key(prefixEventDelivery, evt), sep)
	var ids []string
	var out [][]byte
	it := txn.NewIterator(bdg.IteratorOptions{Prefix: p})
	for it.Rewind(); it.Valid(); it.Next() {
		out = append(out, it.Item().KeyCopy(nil))
		ids = append(ids, string(it.Item().Key()[len(p):]))
	}
	it.Close()
	for _, id := range ids {
		d, err := getDelivery(txn, id)
		if err != nil {
			continue
		}
		out = append(out, deliveryKey(id), endpointDeliveryKey(d.Endpoint, id))
		if !d.State.Terminal() {
			out = append(out, queueKey(d.Endpoint, dueAt(&d), id))
			keep = keep || !d.RetryFrom.Before(cutoff)
		}
		ap := append(key(prefixAttempt, id), sep)
		ai := txn.NewIterator(bdg.IteratorOptions{Prefix: ap})
		for ai.Rewind(); ai.Valid(); ai.Next() {
			out = append(out, ai.Item().KeyCopy(nil))
		}
		ai.Close()
	}
	return out, keep, nil
}

// orKey returns a unless it is nil, else b.
func orKey(a, b []byte) []byte {
	if a != nil {
		return a
	}
	return b
}
