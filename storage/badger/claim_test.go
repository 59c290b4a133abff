package badger

import (
	"context"
	"testing"
	"time"

	bdg "github.com/dgraph-io/badger/v4"
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
	err := db.update(ctx, 64, func(txn *bdg.Txn) error {
		return txn.Set(eventKey(bad.Event.ID), []byte{0xff, 0x00, 0x13})
	})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := db.Claim(ctx, "ep1", now, 10, time.Minute)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(jobs) != 1 || jobs[0].Delivery.ID != good.Deliveries[0].ID || string(jobs[0].Event.Body) != `{}` {
		t.Fatalf("jobs: %+v; want only the good one", jobs)
	}
}
