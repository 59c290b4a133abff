package badger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

// A tenant-scoped listing of deliveries without an event or endpoint walks
// every tenant's deliveries. With a scan budget a page ends short (even
// empty) with a cursor, so one request never reads the whole store, and
// following the cursors still lists every matching record once.
func TestListingsStopAtTheScanBudgetAndGoOnFromThere(t *testing.T) {
	defer func(b int) { listScanBudget = b }(listScanBudget)
	listScanBudget = 4
	ctx := context.Background()
	db, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now().UTC().Add(-time.Minute)
	want := map[string]bool{}
	for i := range 12 {
		tenant := "b" // the ten newest
		if i < 2 {
			tenant = "a"
		}
		req := acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, start.Add(time.Duration(i)*time.Millisecond), "ep-"+tenant)
		req.Key.Tenant, req.Event.Tenant, req.Deliveries[0].Tenant = tenant, tenant, tenant
		if _, err := db.Accept(ctx, req); err != nil {
			t.Fatal(err)
		}
		if tenant == "a" {
			want[req.Deliveries[0].ID] = true
		}
	}

	seen := map[string]int{}
	cursor := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("paging did not end")
		}
		ds, next, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "a", Limit: 10, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if page == 0 && (len(ds) != 0 || next == "") {
			t.Fatalf("first page: %d deliveries, cursor %q; want none and a cursor (4 of tenant b looked at)", len(ds), next)
		}
		for _, d := range ds {
			if d.Tenant != "a" {
				t.Fatalf("listed another tenant's delivery: %+v", d)
			}
			seen[d.ID]++
		}
		if next == "" {
			break
		}
		cursor = next
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("delivery %s listed %d times", id, seen[id])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("listed %d deliveries, want %d", len(seen), len(want))
	}

	// Events by a filter that matches few: the same.
	evs, next, err := db.ListEvents(ctx, storage.EventFilter{Type: "nothing.matches"})
	if err != nil || len(evs) != 0 || next == "" {
		t.Fatalf("events by a rare type: %d, cursor %q, %v; want none and a cursor", len(evs), next, err)
	}
}
