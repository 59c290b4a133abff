package badger

import (
	"context"
	"testing"
	"time"

	"hookgate/storage"
)

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
	for _, r := range []*storage.AcceptRequest{bad, good} {
		if _, err := db.Accept(ctx, r); err != nil {
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
