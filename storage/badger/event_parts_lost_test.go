package badger

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"

	"hookgate/storage"
)

// An event record in parts whose last part is lost (a damaged store) is
// one unreadable event, not a stuck store: listings skip it and go on to
// the others, its delivery fails with an attempt saying why (the
// endpoint's other deliveries go), and retention deletes it with every
// part still there.
func TestPartedEventWithALostPartIsSkippedFailedAndPurged(t *testing.T) {
	db := openTestDB(t, Options{})
	ctx := context.Background()
	then := time.Now().UTC().Add(-2 * time.Hour)
	var ids []string
	for i, size := range []int{1 << 20, 1<<20 + 4096, 1 << 10} {
		body := make([]byte, size)
		if _, err := rand.Read(body); err != nil {
			t.Fatal(err)
		}
		req := acceptRequest(string(rune('a'+i)), "", then.Add(time.Duration(i)*time.Millisecond), "ep")
		req.Event.Body, req.BodyHash = body, sha256.Sum256(body)
		if _, err := db.Accept(ctx, req); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, req.Event.ID)
	}
	if n := countKeys(t, db, prefixEventPart); n != 4 {
		t.Fatalf("%d parts, want 4", n)
	}
	damaged := ids[0]
	if err := db.update(ctx, 64, func(txn *bdg.Txn) error { return txn.Delete(eventPartKey(damaged, 1)) }); err != nil {
		t.Fatal(err)
	}
	if _, err := db.GetEvent(ctx, damaged); !errors.Is(err, errCodec) {
		t.Fatalf("GetEvent of the damaged event: %v, want a malformed record", err)
	}
	page, _, err := db.ListEvents(ctx, storage.EventFilter{Limit: 10})
	if err != nil || len(page) != 2 {
		t.Fatalf("ListEvents: %d events, %v; want the 2 readable ones", len(page), err)
	}
	page, _, err = db.ListEvents(ctx, storage.EventFilter{Tenant: "acme", Limit: 10})
	if err != nil || len(page) != 2 {
		t.Fatalf("tenant ListEvents: %d events, %v; want the 2 readable ones", len(page), err)
	}
	jobs, err := db.Claim(ctx, "ep", time.Now(), 10, time.Minute)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("Claim: %d jobs, %v; want the 2 readable ones", len(jobs), err)
	}
	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Event: damaged})
	if err != nil || len(ds) != 1 || ds[0].State != storage.StateFailed {
		t.Fatalf("the damaged event's delivery: %+v, %v; want failed", ds, err)
	}
	for _, g := range storage.LeaseGroups(deliveriesOf(jobs)) {
		if err := db.Release(ctx, g.IDs, g.Lease, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := db.Purge(ctx, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour), 100); err != nil || n != 3 {
		t.Fatalf("Purge: %d, %v; want all 3 events", n, err)
	}
	for _, p := range [][]byte{prefixEventPart, prefixEvent, prefixTenantEvent, prefixDelivery} {
		if n := countKeys(t, db, p); n != 0 {
			t.Errorf("%d %s keys left after retention", n, p)
		}
	}
}
