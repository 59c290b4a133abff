package badger

import (
	"context"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
)

// One delivery whose own keys (its attempts) are more than Badger takes in
// one transaction goes over several too, attempts first. Found in review:
// the split took a delivery whole, however big, so the transaction failed
// on every sweep and retention stopped for good at this event. Attempts
// are not bounded (max_attempts has no upper limit; 1 s intervals over a
// max_elapsed of a day are ~86,000 attempts; manual retries add more).
func TestPurgeOneDeliveryTooBigForOneTransaction(t *testing.T) {
	// Same ratio as production (16,384 budget / ~52,000 Badger limit):
	// 1 MiB memtables take ~3,300 keys per transaction.
	defer func(b int) { purgeKeyBudget = b }(purgeKeyBudget)
	purgeKeyBudget = 1000
	ctx := context.Background()
	db := openTestDB(t, Options{MemTableSize: 1 << 20})
	then := time.Now().UTC().Add(-2 * time.Hour)
	req := acceptFor(t, db, "acme", "heavy", then, "ep1")
	dlv := req.Deliveries[0].ID
	for chunk := range 10 { // 5,000 attempts of the one delivery
		err := db.update(ctx, 0, func(txn *bdg.Txn) error {
			for i := range 500 {
				if err := txn.Set(attemptKey(dlv, chunk*500+i+1), []byte(`{}`)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	acceptFor(t, db, "acme", "light", then.Add(time.Millisecond), "ep1")

	n, err := db.Purge(ctx, then.Add(time.Hour), then.Add(time.Hour), 100)
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2 events deleted, no error", n, err)
	}
	for _, p := range [][]byte{prefixAttempt, prefixDelivery, prefixEventDelivery, prefixEvent} {
		if n := countKeys(t, db, p); n != 0 {
			t.Errorf("%d keys left under %q", n, p)
		}
	}
}
