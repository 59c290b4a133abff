package badger

import (
	"context"
	"hookgate/storage"
	"testing"
	"time"
)

// A claimed delivery whose event record cannot be read must not hold back
// the endpoint's other deliveries: before, the whole claim failed, and as
// the oldest due delivery it was in every claim: the endpoint's outbox
// stalled for good.
func TestClaimSkipsADeliveryWhoseEventCannotBeRead(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	bad := acceptRequest("bad", `{}`, now.Add(-time.Second), "ep1")
	good := acceptRequest("good", `{}`, now, "ep1")
	if _, err := db.Ingest(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(ctx, good); err != nil {
		t.Fatal(err)
	}
	damage(t, db, eventKey(bad.Event.ID))
	jobs, err := db.Claim(ctx, "ep1", now, 10, time.Minute)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(jobs) != 1 || jobs[0].Delivery.ID != good.Deliveries[0].ID || string(jobs[0].Event.Body) != `{}` {
		t.Fatalf("jobs: %+v; want only the good one", jobs)
	}
}

// enqueueBacklog stores one event and n due deliveries of it to endpoint,
// in writes of 2,000.
func enqueueBacklog(t *testing.T, db *DB, endpoint string, n int, now time.Time) {
	t.Helper()
	req := acceptFor(t, db, "acme", "backlog", now, endpoint)
	for n > 0 {
		k := min(n, 2000)
		ds := make([]storage.Delivery, k)
		for i := range ds {
			d := req.Deliveries[0]
			d.ID = storage.NewID("dlv_", now)
			ds[i] = d
		}
		if err := db.Enqueue(context.Background(), ds); err != nil {
			t.Fatal(err)
		}
		n -= k
	}
}

// A claim of more than one transaction holds takes storage.MaxClaim. With
// max_in_flight 20000 and a backlog that large (an outage of the
// receiver), the claim was one Badger transaction of ~60,000 keys:
// ErrTxnTooBig, every time, and the backlog was never delivered.
func TestClaimOfMoreThanATransactionHoldsDoesNotFail(t *testing.T) {
	const n = 20000
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	enqueueBacklog(t, db, "ep1", n, now)
	jobs, err := db.Claim(context.Background(), "ep1", now.Add(time.Second), n, time.Minute)
	if err != nil {
		t.Fatalf("Claim(limit %d) of a backlog of %d: %v; the endpoint's loop would fail this claim for ever", n, n, err)
	}
	if len(jobs) != storage.MaxClaim {
		t.Fatalf("Claim took %d of a due backlog of %d; want storage.MaxClaim", len(jobs), n)
	}
}

// Found in review: a delivery whose event record cannot be read was left
// "claimed until its lease ends", and nothing ever ended it (each claim
// took it again and skipped it, no attempt counted), while retention,
// which would delete it with its event, failed on the same record on every
// sweep, for every event. Now the claim fails it with an attempt saying
// why, and retention deletes the record.
func TestAnUnreadableEventFailsItsDeliveryAndIsPurged(t *testing.T) {
	ctx := context.Background()
	db := openTestDB(t, Options{})
	now := time.Now().UTC()
	bad := acceptRequest("bad", `{}`, now.Add(-time.Second), "ep1")
	good := acceptRequest("good", `{}`, now, "ep2") // expired too; another endpoint
	for _, r := range []*storage.IngestRequest{bad, good} {
		if _, err := db.Ingest(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	damage(t, db, eventKey(bad.Event.ID))
	id := bad.Deliveries[0].ID
	at := now
	for i := range 3 { // three lease periods
		jobs, err := db.Claim(ctx, "ep1", at, 10, time.Minute)
		if err != nil || len(jobs) != 0 {
			t.Fatalf("claim %d: %v %+v", i, err, jobs)
		}
		at = at.Add(time.Minute + time.Second)
	}
	d, err := db.GetDelivery(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	atts, err := db.ListAttempts(ctx, id)
	if err != nil || d.State != storage.StateFailed || d.AttemptCount != 1 || len(atts) != 1 || atts[0].Error == "" {
		t.Fatalf("after 3 leases: state=%s attempts=%d %+v %v; want failed with one attempt saying why", d.State, d.AttemptCount, atts, err)
	}
	// Retention, long after: the event and its delivery should go.
	n, perr := db.Purge(ctx, at.Add(48*time.Hour), at.Add(48*time.Hour), 100)
	d, gerr := db.GetDelivery(ctx, id)
	_, gooderr := db.GetEvent(ctx, good.Event.ID)
	if perr != nil || gerr == nil || gooderr == nil {
		t.Fatalf("purge past retention: n=%d err=%v (the other expired event still there: %v); the delivery is still there (state=%s, attempts=%d): "+
			"it is re-claimed and skipped every lease for ever, and retention cannot remove it", n, perr, gooderr == nil, d.State, d.AttemptCount)
	}
}
