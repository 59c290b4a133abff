package badger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"hookgate/storage"
)

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
		if _, err := db.Accept(ctx, req); err != nil {
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
