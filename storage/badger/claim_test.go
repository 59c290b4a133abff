package badger

import (
	"context"
	"testing"
	"time"

	"hookgate/storage"
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
	if _, err := db.Accept(ctx, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Accept(ctx, good); err != nil {
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
