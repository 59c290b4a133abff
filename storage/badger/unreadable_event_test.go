package badger

import (
	"context"
	"testing"
	"time"

	"hookgate/storage"
)

// An event record that cannot be decoded (the damage RELIABILITY.md
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
	for _, r := range []*storage.AcceptRequest{older, bad, newer} {
		if _, err := db.Accept(ctx, r); err != nil {
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
