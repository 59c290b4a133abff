package badger

import (
	"context"
	"fmt"
	"hookgate/storage"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
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
		if _, err := db.Ingest(ctx, req); err != nil {
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

// Found in review: once a page was full, listPage kept loading records
// that did not match (looking for one more match to know there is a next
// page) with no bound: one recent match among millions of records read
// the whole store.
func TestListPageBudgetBoundsScanOfAFullPage(t *testing.T) {
	defer func(b int) { listScanBudget = b }(listScanBudget)
	listScanBudget = 4
	db := openTestDB(t, Options{})
	start := time.Now().UTC().Add(-time.Minute)
	for i := range 21 {
		tenant := "b"
		if i == 20 { // the newest
			tenant = "a"
		}
		acceptFor(t, db, tenant, fmt.Sprintf("evt-%d", i), start.Add(time.Duration(i)*time.Millisecond), "ep-"+tenant)
	}
	loads := 0
	q := pageQuery{prefixes: [][]byte{prefixDelivery}, idPrefix: "dlv_", limit: 1}
	out, next, err := listPage(db, q, func(txn *bdg.Txn, id string) (storage.Delivery, bool, error) {
		loads++
		d, err := getDelivery(txn, id)
		return d, d.Tenant == "a", err
	}, func(d *storage.Delivery) string { return d.ID }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if loads > listScanBudget+1 {
		t.Fatalf("a full page (%d records, cursor %q) loaded %d records with a scan budget of %d", len(out), next, loads, listScanBudget)
	}
}

// Found in review: with a scan budget over every tenant's deliveries,
// whether a tenant's page stopped short told it whether other tenants had
// records in a time window (with since/until, to the millisecond). A
// tenant's listing now reads only its own deliveries.
func TestScanBudgetRevealsNothingOfOtherTenants(t *testing.T) {
	defer func(b int) { listScanBudget = b }(listScanBudget)
	listScanBudget = 4
	ctx := context.Background()
	db := openTestDB(t, Options{})
	start := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
	for i := range 4 { // tenant b's deliveries at +0, +10, +20, +30 ms
		req := acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, start.Add(time.Duration(i)*10*time.Millisecond), "ep-b")
		req.Key.Tenant, req.Event.Tenant, req.Deliveries[0].Tenant = "b", "b", "b"
		if _, err := db.Ingest(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// Tenant a has no deliveries at all: its answers must not depend on
	// tenant b's.
	answer := func(until time.Time) string {
		ds, next, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "a", Since: start, Until: until, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%d deliveries, more: %v", len(ds), next != "")
	}
	a, b := answer(start.Add(25*time.Millisecond)), answer(start.Add(35*time.Millisecond))
	if a != b {
		t.Fatalf("tenant a sees %q up to +25ms and %q up to +35ms: it learns tenant b has a record in (25ms, 35ms]", a, b)
	}
}

// The type filter of ListEvents is a glob (storage.MatchType): on a
// tenant's listing (its et: index) as on an operator's, with "/" in types
// (Shopify topics), with a glob of escapes only, across cursors, and a
// glob that matches nothing stops at the scan budget with a cursor.
func TestListEventsTypeGlobOnTenantIndexWithPaging(t *testing.T) {
	defer func(b int) { listScanBudget = b }(listScanBudget)
	listScanBudget = 5
	ctx := context.Background()
	db := openTestDB(t, Options{})
	start := time.Now().UTC().Add(-time.Minute)
	types := []string{"orders/create", "orders/paid", "products/update", "a*b"}
	want := map[string]map[string]int{} // tenant → glob → count
	for i := range 24 {
		tenant := []string{"t1", "t2"}[i%2]
		typ := types[(i/2)%len(types)]
		req := acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, start.Add(time.Duration(i)*time.Millisecond), "ep-"+tenant)
		req.Key.Tenant, req.Event.Tenant, req.Deliveries[0].Tenant = tenant, tenant, tenant
		req.Event.Type = typ
		if _, err := db.Ingest(ctx, req); err != nil {
			t.Fatal(err)
		}
		if want[tenant] == nil {
			want[tenant] = map[string]int{}
		}
		for _, g := range []string{"orders/*", "*", "*/create", `a\*b`, `\a\*\b`, "orders?paid", "nothing.*"} {
			if storage.MatchType(g, typ) {
				want[tenant][g]++
			}
		}
	}
	for _, tenant := range []string{"t1", "t2", ""} {
		for _, g := range []string{"orders/*", "*", "*/create", `a\*b`, `\a\*\b`, "orders?paid", "nothing.*"} {
			n, cursor, pages := 0, "", 0
			for {
				evs, next, err := db.ListEvents(ctx, storage.EventFilter{Tenant: tenant, Type: g, Limit: 2, Cursor: cursor})
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range evs {
					if !storage.MatchType(g, ev.Type) || tenant != "" && ev.Tenant != tenant {
						t.Fatalf("%q/%q listed %+v", tenant, g, ev)
					}
				}
				if g == "nothing.*" && pages == 0 && next == "" {
					t.Fatalf("tenant %q, %q: first page without a cursor", tenant, g)
				}
				n += len(evs)
				pages++
				if next == "" || pages > 100 {
					break
				}
				cursor = next
			}
			w := want["t1"][g] + want["t2"][g]
			if tenant != "" {
				w = want[tenant][g]
			}
			if n != w {
				t.Errorf("tenant %q, glob %q: %d events, want %d", tenant, g, n, w)
			}
		}
	}
}
