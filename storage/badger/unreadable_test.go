package badger

import (
	"context"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"testing"
	"time"
)

// An event record that cannot be decoded (the damage docs/guarantees.md
// section 6 deals with for claims and retention) is skipped by the event
// listings it is on, as delivery listings skip theirs. It failed them:
// GET /events answered 503 for that page, and a bulk replay over it failed
// for good, until retention deleted the record weeks later.
func TestListEventsGoesPastAnUnreadableEventRecord(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	older := acceptRequest("older", `{}`, now.Add(-2*time.Second), "ep1")
	bad := acceptRequest("bad", `{}`, now.Add(-time.Second), "ep1")
	newer := acceptRequest("newer", `{}`, now, "ep1")
	for _, r := range []*storage.IngestRequest{older, bad, newer} {
		if _, err := db.Ingest(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	damage(t, db, eventKey(bad.Event.ID))
	for _, f := range []storage.EventFilter{{Tenant: "acme"}, {Tenant: "acme", Source: "stripe"}, {}} {
		evs, next, err := db.ListEvents(ctx, f)
		if err != nil {
			t.Fatalf("ListEvents(%+v) fails because of one damaged event record: %v", f, err)
		}
		if len(evs) != 2 || evs[0].ID != newer.Event.ID || evs[1].ID != older.Event.ID || next != "" {
			t.Fatalf("ListEvents(%+v) = %d events (next %q); want the two readable ones", f, len(evs), next)
		}
	}
}

// badAndGood stores two events with a delivery each to ep1, the older one
// (bad) with its delivery record damaged.
func badAndGood(t *testing.T, db *DB, now time.Time) (bad, good *storage.IngestRequest) {
	t.Helper()
	bad = acceptRequest("bad", `{}`, now.Add(-time.Second), "ep1")
	good = acceptRequest("good", `{}`, now, "ep1")
	for _, r := range []*storage.IngestRequest{bad, good} {
		if _, err := db.Ingest(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	damage(t, db, deliveryKey(bad.Deliveries[0].ID))
	return bad, good
}

// One delivery record that cannot be decoded must not stall its
// endpoint's outbox, nor fail the listings it is on. As the endpoint's
// oldest due entry it failed every claim, and no other delivery to the
// endpoint was ever sent again.
func TestClaimSkipsAnUnreadableDeliveryRecord(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	_, good := badAndGood(t, db, now)
	for i := range 3 {
		jobs, err := db.Claim(ctx, "ep1", now.Add(time.Duration(i)*2*time.Minute), 10, time.Minute)
		if err != nil {
			t.Fatalf("claim %d of ep1 fails because of one damaged delivery record: %v; "+
				"the endpoint's other deliveries (%s) are never sent", i, err, good.Deliveries[0].ID)
		}
		if i == 0 && (len(jobs) != 1 || jobs[0].Delivery.ID != good.Deliveries[0].ID) {
			t.Fatalf("jobs: %+v; want the good delivery", jobs)
		}
	}
	for _, f := range []storage.DeliveryFilter{{Tenant: "acme"}, {Endpoint: "ep1"}, {}} {
		ds, _, err := db.ListDeliveries(ctx, f)
		if err != nil || len(ds) != 1 || ds[0].ID != good.Deliveries[0].ID {
			t.Fatalf("listing %+v: %+v, %v; want the good delivery only", f, ds, err)
		}
	}
}

// Cancelling an endpoint's backlog goes past an unreadable record (the
// background cancel of a deleted endpoint retried it for ever).
func TestCancelEndpointGoesPastAnUnreadableDeliveryRecord(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	badAndGood(t, db, now)
	n, err := db.CancelEndpoint(ctx, "ep1")
	if err != nil || n != 1 {
		t.Fatalf("cancel: %d, %v; want the good delivery cancelled", n, err)
	}
	if q := countKeys(t, db, prefixQueue); q != 0 {
		t.Fatalf("%d outbox entries left after the cancel", q)
	}
}

// Retention removes a damaged delivery record with its event; its outbox
// entry goes at the endpoint's next claim. Before, only the event's index
// entry of it went, and the record and its outbox entry stayed for ever.
func TestPurgeRemovesAnUnreadableDeliveryRecord(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	bad := acceptRequest("bad", `{}`, now.Add(-2*time.Hour), "ep1")
	if _, err := db.Ingest(ctx, bad); err != nil {
		t.Fatal(err)
	}
	damage(t, db, deliveryKey(bad.Deliveries[0].ID))
	n, err := db.Purge(ctx, now.Add(-time.Hour), now.Add(-time.Hour), 100)
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if left := countKeys(t, db, prefixDelivery) + countKeys(t, db, prefixEventDelivery); left != 0 {
		t.Fatalf("after its event was purged, %d keys of the damaged delivery are left", left)
	}
	if jobs, err := db.Claim(ctx, "ep1", now, 10, time.Minute); err != nil || len(jobs) != 0 {
		t.Fatalf("claim after the purge: %+v, %v", jobs, err)
	}
	if q := countKeys(t, db, prefixQueue); q != 0 {
		t.Fatalf("%d outbox entries left after a claim", q)
	}
}

// The tenant index of deliveries is built past an unreadable record.
func TestTenantIndexBuildGoesPastAnUnreadableDeliveryRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	_, good := badAndGood(t, db, now)
	dropTenantIndex(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	testsupport.WaitFor(t, 10*time.Second, "the tenant index to be built", db.tenantIndexReady.Load)
	ds, _, err := db.ListDeliveries(ctx, storage.DeliveryFilter{Tenant: "acme"})
	if err != nil || len(ds) != 1 || ds[0].ID != good.Deliveries[0].ID {
		t.Fatalf("tenant listing: %+v, %v; want the good delivery", ds, err)
	}
}

// Retention removes an unreadable delivery record's attempts too (with the
// receiver's response excerpts): they are keyed by the delivery's id,
// which the event's index names. They were kept for ever, with nothing
// left that listed or purged them.
func TestPurgeRemovesTheAttemptsOfAnUnreadableDeliveryRecord(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	old := now.Add(-2 * time.Hour)
	req := acceptRequest("bad", `{}`, old, "ep1")
	if _, err := db.Ingest(ctx, req); err != nil {
		t.Fatal(err)
	}
	jobs, err := db.Claim(ctx, "ep1", now, 10, time.Minute)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %+v, %v", jobs, err)
	}
	j := jobs[0]
	if err := db.Complete(ctx, &storage.Outcome{Delivery: j.Delivery.ID, Lease: j.Delivery.LeaseUntil, CountAttempt: true,
		Attempt: storage.Attempt{N: 1, At: now, StatusCode: 200, Response: "the receiver's answer"}, State: storage.StateSucceeded}); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, db, prefixAttempt); n != 1 {
		t.Fatalf("%d attempt keys before the purge, want 1", n)
	}
	damage(t, db, deliveryKey(j.Delivery.ID))
	n, err := db.Purge(ctx, now.Add(-time.Hour), now.Add(-time.Hour), 100)
	if err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	if left := countKeys(t, db, prefixAttempt); left != 0 {
		t.Fatalf("after its event and record were purged, %d attempt keys of the damaged delivery are left for ever", left)
	}
}
