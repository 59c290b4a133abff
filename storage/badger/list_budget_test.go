package badger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

// A filter that matches few records (a rare type) would read the whole
// store for one page. With a scan budget a page ends short (even empty)
// with a cursor, and following the cursors still lists every matching
// record once. A tenant's listing of deliveries reads that tenant's own
// (its index), so it is never cut short by other tenants' records.
func TestListingsStopAtTheScanBudgetAndGoOnFromThere(t *testing.T) {
	defer func(b int) { listScanBudget = b }(listScanBudget)
	listScanBudget = 4
	ctx := context.Background()
	db := openTestDB(t, Options{})
	start := time.Now().UTC().Add(-time.Minute)
	want := map[string]bool{}
	var wantDeliveries []string
	for i := range 12 {
		tenant := "b" // the ten newest
		if i < 2 {
			tenant = "a"
		}
		req := acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, start.Add(time.Duration(i)*time.Millisecond), "ep-"+tenant)
		req.Key.Tenant, req.Event.Tenant, req.Deliveries[0].Tenant = tenant, tenant, tenant
		req.Event.Type = tenant + ".type"
		if _, err := db.Accept(ctx, req); err != nil {
			t.Fatal(err)
		}
		if tenant == "a" {
			want[req.Event.ID] = true
			wantDeliveries = append(wantDeliveries, req.Deliveries[0].ID)
		}
	}

	seen := map[string]int{}
	cursor := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("paging did not end")
		}
		evs, next, err := db.ListEvents(ctx, storage.EventFilter{Type: "a.type", Limit: 10, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if page == 0 && (len(evs) != 0 || next == "") {
			t.Fatalf("first page: %d events, cursor %q; want none and a cursor (4 others looked at)", len(evs), next)
		}
		for _, ev := range evs {
			if ev.Type != "a.type" {
				t.Fatalf("listed an event of another type: %+v", ev)
			}
			seen[ev.ID]++
		}
		if next == "" {
			break
		}
		cursor = next
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s listed %d times", id, seen[id])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("listed %d events, want %d", len(seen), len(want))
	}

	ds, next, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "a", Limit: 10})
	if err != nil || len(ds) != 2 || next != "" || ds[0].ID != wantDeliveries[1] || ds[1].ID != wantDeliveries[0] {
		t.Fatalf("tenant a's deliveries: %+v, cursor %q, %v; want both on one page, newest first", ds, next, err)
	}
}
