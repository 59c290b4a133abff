package badger

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// A store written before the tenant index existed: Open builds it in the
// background; until it is done a tenant's listing scans every tenant's
// deliveries without a budget (complete, not cut short by others' records),
// and after it lists from the index.
func TestTenantIndexIsBuiltForOlderStores(t *testing.T) {
	defer func(b, c int) { listScanBudget, tenantIndexChunk = b, c }(listScanBudget, tenantIndexChunk)
	listScanBudget, tenantIndexChunk = 6, 3 // six: all of tenant a's from the index, half of them from a scan of all
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Add(-time.Minute)
	var mine []string
	for i := range 10 {
		tenant := "b"
		if i%2 == 0 {
			tenant = "a"
		}
		req := acceptFor(t, db, tenant, fmt.Sprintf("evt-%d", i), start.Add(time.Duration(i)*time.Millisecond), "ep-"+tenant)
		if tenant == "a" {
			mine = append(mine, req.Deliveries[0].ID)
		}
	}
	dropTenantIndex(t, db) // make it an older store
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	var logs lockedBuffer // README: "a log line says when it is done"
	db, err = Open(dir, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !db.tenantIndexReady.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the tenant index was not built")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := countKeys(t, db, prefixTenantDelivery); n != 10 {
		t.Fatalf("%d index keys, want 10", n)
	}
	if !strings.Contains(logs.String(), `msg="built the tenant index of deliveries" deliveries=10`) {
		t.Fatalf("no log line for the build: %q", logs.String())
	}
	list := func() ([]storage.Delivery, string) {
		ds, next, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "a", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return ds, next
	}
	if ds, next := list(); len(ds) != len(mine) || next != "" {
		t.Fatalf("from the index: %d deliveries, cursor %q; want %d on one page", len(ds), next, len(mine))
	}
	// While an index is being built: the scan of every tenant's, complete.
	db.tenantIndexReady.Store(false)
	if ds, next := list(); len(ds) != len(mine) || next != "" {
		t.Fatalf("without the index: %d deliveries, cursor %q; want %d on one page", len(ds), next, len(mine))
	}
	db.tenantIndexReady.Store(true)

	// A new store is marked at once; a reopened one stays marked.
	fresh, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if !fresh.tenantIndexReady.Load() {
		t.Fatal("a new store is not marked as indexed")
	}
}

// Retention deletes the index keys with the deliveries.
func TestPurgeDeletesTenantIndexKeys(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	then := time.Now().UTC().Add(-2 * time.Hour)
	for i := range 3 {
		if _, err := db.Ingest(ctx, acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, then.Add(time.Duration(i)*time.Millisecond), "ep1")); err != nil {
			t.Fatal(err)
		}
	}
	if n := countKeys(t, db, prefixTenantDelivery); n != 3 {
		t.Fatalf("%d index keys, want 3", n)
	}
	if n, err := db.Purge(ctx, then.Add(time.Hour), then.Add(time.Hour), 100); err != nil || n != 3 {
		t.Fatalf("purged %d, %v", n, err)
	}
	if n := countKeys(t, db, prefixTenantDelivery); n != 0 {
		t.Fatalf("%d index keys left after the purge", n)
	}
}

// lockedBuffer is a log destination for several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
