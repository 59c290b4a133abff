package badger

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// openTestDB opens a store in a temporary directory, closed when the test
// ends.
func openTestDB(t *testing.T, o Options) *DB {
	t.Helper()
	db, err := Open(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// acceptFor stores an event of tenant, received at, with one delivery to
// endpoint.
func acceptFor(t *testing.T, db *DB, tenant, id string, at time.Time, endpoint string) *storage.IngestRequest {
	t.Helper()
	req := acceptRequest(id, `{}`, at, endpoint)
	req.Key.Tenant, req.Event.Tenant, req.Deliveries[0].Tenant = tenant, tenant, tenant
	if _, err := db.Ingest(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	return req
}

// keptAndDue stores n events of tenant acme received two hours before now,
// one delivery each, and replays the first keep of them now: a retry
// budget from now keeps those from retention with a cutoff of an hour ago.
// It returns the IDs of the kept events and of the others, oldest first.
func keptAndDue(t *testing.T, db *DB, now time.Time, n, keep int) (kept, due []string) {
	t.Helper()
	then := now.Add(-2 * time.Hour)
	var fresh []storage.Delivery
	for i := range n {
		req := acceptFor(t, db, "acme", fmt.Sprintf("evt-%d", i), then.Add(time.Duration(i)*time.Millisecond), "ep1")
		if i >= keep {
			due = append(due, req.Event.ID)
			continue
		}
		kept = append(kept, req.Event.ID)
		d := req.Deliveries[0]
		d.ID = storage.NewID("dlv_", now)
		d.CreatedAt, d.NextAttemptAt, d.RetryFrom, d.UpdatedAt = now, now, now, now
		fresh = append(fresh, d)
	}
	if err := db.Enqueue(context.Background(), fresh); err != nil {
		t.Fatal(err)
	}
	return kept, due
}

// dropTenantIndex makes db a store from before the tenant index of
// deliveries: no index, no mark that it was built.
func dropTenantIndex(t *testing.T, db *DB) {
	t.Helper()
	err := db.update(context.Background(), 1024, func(txn *bdg.Txn) error {
		it := txn.NewIterator(bdg.IteratorOptions{Prefix: prefixTenantDelivery})
		var keys [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		it.Close()
		for _, k := range append(keys, keyTenantIndexBuilt) {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, db, prefixTenantDelivery); n != 0 {
		t.Fatalf("%d index keys left", n)
	}
}

// damage overwrites the record at k with bytes that do not decode (the
// damage docs/guarantees.md deals with).
func damage(t *testing.T, db *DB, k []byte) {
	t.Helper()
	if err := db.update(context.Background(), 64, func(txn *bdg.Txn) error {
		return txn.Set(k, []byte{0xff, 0x00, 0x13})
	}); err != nil {
		t.Fatal(err)
	}
}

// setTestKey writes key through the store's writer; it returns once the
// write is durable (or failed).
func setTestKey(db *DB, key string) error {
	return db.update(context.Background(), 16, func(txn *bdg.Txn) error { return txn.Set([]byte(key), []byte("v")) })
}

// getTestKey reads key: nil when it is there.
func getTestKey(db *DB, key string) error {
	return db.view(func(txn *bdg.Txn) error {
		_, err := txn.Get([]byte(key))
		return err
	})
}

// A syncHold holds syncs of a store's logs in its file-sync hook.
type syncHold struct {
	gate    chan struct{}
	release func() // lets the held syncs go on; safe to call again
	// entered is set once a sync is held.
	entered atomic.Bool
	mu      sync.Mutex
	held    *os.File   // the first file held
	during  []*os.File // files synced and not held since then
}

// holdSyncs makes db's next file sync wait (every one, with all) until
// release, which the end of the test calls too; a held sync then
// returns heldErr, or its fdatasync's result when heldErr is nil.
func holdSyncs(t *testing.T, db *DB, all bool, heldErr error) *syncHold {
	t.Helper()
	h := &syncHold{gate: make(chan struct{})}
	var once sync.Once
	h.release = func() { once.Do(func() { close(h.gate) }) }
	t.Cleanup(h.release)
	db.logs.syncFile = func(f *os.File) error {
		if h.entered.CompareAndSwap(false, true) || all {
			h.mu.Lock()
			if h.held == nil {
				h.held = f
			}
			h.mu.Unlock()
			<-h.gate
			if heldErr != nil {
				return heldErr
			}
		} else {
			h.mu.Lock()
			h.during = append(h.during, f)
			h.mu.Unlock()
		}
		return fdatasync(f)
	}
	return h
}
