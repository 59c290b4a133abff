package badger

import (
	"context"
	"fmt"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// Found in review: a dt: key whose delivery is gone failed the tenant's
// whole listing with ErrNotFound (the admin API answered 404 to GET
// /deliveries), for good: retention finds deliveries through de: keys and
// never deletes such a key. An earlier build's retention leaves exactly
// this after a downgrade and upgrade (it deletes dl:, de:, dp:, dq:, but
// knows nothing of dt:). Listings now skip an index key without a record.
func TestTenantListingSurvivesAnOrphanIndexKey(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	start := time.Now().UTC().Add(-2 * time.Hour)
	var dls []storage.Delivery
	for i := range 3 {
		req := acceptRequest(fmt.Sprintf("evt-%d", i), `{}`, start.Add(time.Duration(i)*time.Millisecond), "ep1")
		if _, err := db.Ingest(ctx, req); err != nil {
			t.Fatal(err)
		}
		dls = append(dls, req.Deliveries[0])
	}
	// The oldest event purged as a build before the tenant index did it.
	d := dls[0]
	err := db.update(ctx, 1024, func(txn *bdg.Txn) error {
		for _, k := range [][]byte{
			eventKey(d.Event), tenantEventKey(d.Tenant, d.Event), eventDeliveryKey(d.Event, d.ID),
			deliveryKey(d.ID), endpointDeliveryKey(d.Endpoint, d.ID), queueKey(d.Endpoint, dueAt(&d), d.ID),
		} {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Purge(ctx, time.Now(), time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	left := countKeys(t, db, prefixTenantDelivery)
	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "acme", Limit: 10})
	if err != nil {
		t.Fatalf("tenant listing with an orphan dt: key (%d left after a purge): %v", left, err)
	}
	if len(ds) != 0 {
		t.Fatalf("listed %d deliveries after purging all", len(ds))
	}
}
