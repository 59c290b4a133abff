package badger

import (
	"context"
	"errors"
	"fmt"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// staleClaimWindow is how far ahead of now, beyond the longest lease
// (storage.MaxLease), Open looks for claims: for a clock stepped back a
// little between a crash and the restart. It was once beyond the
// endpoint's own timeout, but a claim's lease may be longer than that:
// the dispatcher's default lease follows delivery.timeout, and the
// endpoint's timeout may have been lowered while the attempt was in
// flight. Such claims stayed "delivering" after a crash until their lease
// ended, up to an hour.
const staleClaimWindow = 10 * time.Minute

// releaseStaleClaims makes every delivery still claimed by an earlier
// process due now. Badger locks its directory, so no other process can
// hold a claim on this store: each one found at open was made by a
// process that died (or stopped without releasing), and waiting for its
// lease would only delay the delivery by up to a minute. No attempt is
// counted: the dead attempt's outcome is unknown, and delivery is at least
// once (the endpoint deduplicates on the Idempotency-Key).
func (db *DB) releaseStaleClaims(ctx context.Context, now time.Time) (int, error) {
	eps, err := db.ListEndpoints(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, ep := range eps {
		var stale []storage.Delivery
		err := db.view(func(txn *bdg.Txn) error {
			p := queuePrefix(ep.ID)
			it := txn.NewIterator(bdg.IteratorOptions{Prefix: p})
			defer it.Close()
			for it.Seek(queueSeek(ep.ID, dueNanos(now))); it.Valid(); it.Next() {
				due, id, ok := parseQueueKey(p, it.Item().Key())
				if !ok {
					continue
				}
				if due.After(now.Add(storage.MaxLease + staleClaimWindow)) {
					break
				}
				d, err := getDelivery(txn, id)
				if err == nil && d.State == storage.StateDelivering && d.LeaseUntil.Equal(due) {
					stale = append(stale, d)
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		for _, g := range storage.LeaseGroups(stale) {
			if err := db.Release(ctx, g.IDs, g.Lease, now); err != nil {
				return total, fmt.Errorf("release stale claims of %s: %w", ep.ID, err)
			}
			total += len(g.IDs)
		}
	}
	return total, nil
}

// releaseHeldKeys ends every admin Idempotency-Key claim left running by an
// earlier process, as AbandonKey would have: a retry of the same request
// then executes at once instead of answering 409 until the dead lease ends
// (up to 30 s after a restart), and the use of the key is still
// remembered (another request under it is a 422). Only this process can
// hold a claim on this store (the directory lock), so none found at open
// is live.
func (db *DB) releaseHeldKeys(ctx context.Context) (int, error) {
	var held [][]byte
	err := db.view(func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefixIdem, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var rec idemRecord
			item := it.Item()
			if err := item.Value(func(b []byte) error { return decode(b, &rec) }); err != nil {
				continue // unreadable: ClaimKey reports it to the request that uses the key
			}
			if !rec.Done && !rec.LeaseUntil.IsZero() {
				held = append(held, item.KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	const perBatch = 256
	released := 0
	for len(held) > 0 {
		chunk := held[:min(perBatch, len(held))]
		held = held[len(chunk):]
		n := 0
		err := db.update(ctx, perBatch*256, func(txn *bdg.Txn) error {
			for _, k := range chunk {
				item, err := txn.Get(k)
				if errors.Is(err, bdg.ErrKeyNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				var rec idemRecord
				if err := item.Value(func(b []byte) error { return decode(b, &rec) }); err != nil || rec.Done || rec.LeaseUntil.IsZero() {
					continue
				}
				rec.LeaseUntil = time.Time{}
				b, err := encode(&rec)
				if err != nil {
					return err
				}
				e := bdg.NewEntry(k, b)
				e.ExpiresAt = item.ExpiresAt() // the key is remembered as long as before
				if err := txn.SetEntry(e); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			return released, fmt.Errorf("release idempotency keys: %w", err)
		}
		released += n
	}
	return released, nil
}
