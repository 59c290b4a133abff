package badger

import (
	"context"
	"fmt"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

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
		if _, err := db.Accept(ctx, req); err != nil {
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
