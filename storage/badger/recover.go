package badger

import (
	"context"
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
