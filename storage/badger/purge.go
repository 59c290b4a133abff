package badger

import (
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

// Purge deletes up to limit events received before cutoff, with their
// deliveries, outbox entries and attempts, in one transaction of at most
// purgeKeyBudget keys (so it may delete fewer, but always at least one
// event when one is due). Event IDs are time-ordered, so the oldest events
// are the first keys.
func (db *DB) Purge(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	n := 0
	err := db.update(ctx, 2048*limit, func(txn *bdg.Txn) error {
		n = 0
		var dels [][]byte
		var events []storage.Event
		var keys [][]byte // of events
		for _, p := range eventPrefixes {
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: p})
			for it.Rewind(); it.Valid() && len(events) < limit; it.Next() {
				id := string(it.Item().Key()[len(p):])
				t, ok := storage.IDTime("evt_", id)
				if ok && !t.Before(cutoff) {
					break
				}
				var ev storage.Event
				if err := it.Item().Value(func(b []byte) error { return decode(b, &ev) }); err != nil {
					it.Close()
					return err
				}
				ev.ID = id
				events = append(events, ev)
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			it.Close()
		}
		for i, ev := range events {
			ks, err := eventDeliveryKeys(txn, ev.ID)
			if err != nil {
				return err
			}
			if n > 0 && len(dels)+len(ks)+2 > purgeKeyBudget {
				break // the rest in the next call
			}
			dels = append(dels, keys[i], tenantEventKey(ev.Tenant, ev.ID))
			dels = append(dels, ks...)
			n++
		}
		for _, k := range dels {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// eventDeliveryKeys lists every key that belongs to the deliveries of an
// event: indexes, records, outbox entries and attempts.
func eventDeliveryKeys(txn *bdg.Txn, evt string) ([][]byte, error) {
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
		}
		ap := append(key(prefixAttempt, id), sep)
		ai := txn.NewIterator(bdg.IteratorOptions{Prefix: ap})
		for ai.Rewind(); ai.Valid(); ai.Next() {
			out = append(out, ai.Item().KeyCopy(nil))
		}
		ai.Close()
	}
	return out, nil
}
