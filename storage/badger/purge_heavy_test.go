package badger

import (
	"context"
	"testing"
	"time"

	"hookgate/storage"
)

// An event whose keys (its deliveries' records, indexes and attempts) are
// more than one transaction may delete is purged over several, a few
// whole deliveries at a time, and leaves no key behind. Before, it was
// deleted in one transaction or not at all: past Badger's limit (~52,000
// keys, thousands of replays of one event) every sweep failed on it and
// retention stopped for good.
func TestPurgeSplitsAnEventTooBigForOneTransaction(t *testing.T) {
	// With 1 MiB memtables Badger takes ~3,300 keys per transaction; the
	// event below has ~4,000 (1,000 deliveries of 4 keys).
	defer func(b int) { purgeKeyBudget = b }(purgeKeyBudget)
	purgeKeyBudget = 1000
	ctx := context.Background()
	db := openTestDB(t, Options{MemTableSize: 1 << 20})
	then := time.Now().UTC().Add(-2 * time.Hour)
	heavy := acceptRequest("heavy", `{}`, then, "ep1")
	if _, err := db.Accept(ctx, heavy); err != nil {
		t.Fatal(err)
	}
	for range 5 { // replays, finished long ago
		var more []storage.Delivery
		for range 200 {
			d := heavy.Deliveries[0]
			d.ID = storage.NewID("dlv_", then)
			d.State = storage.StateFailed
			more = append(more, d)
		}
		if err := db.Enqueue(ctx, more); err != nil {
			t.Fatal(err)
		}
	}
	light := acceptRequest("light", `{}`, then.Add(time.Millisecond), "ep1")
	if _, err := db.Accept(ctx, light); err != nil {
		t.Fatal(err)
	}

	purged := 0
	for range 20 {
		n, err := db.Purge(ctx, then.Add(time.Hour), then.Add(time.Hour), 100)
		if err != nil {
			t.Fatalf("purge: %v", err)
		}
		if n == 0 {
			break
		}
		purged += n
	}
	if purged != 2 {
		t.Fatalf("purged %d events, want 2", purged)
	}
	for _, p := range [][]byte{prefixEvent, prefixTenantEvent, prefixDelivery, prefixEventDelivery,
		prefixEndpointDelivery, prefixTenantDelivery, prefixQueue, prefixAttempt} {
		if n := countKeys(t, db, p); n != 0 {
			t.Errorf("%d keys left under %q", n, p)
		}
	}
}
