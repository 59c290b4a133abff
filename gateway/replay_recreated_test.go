package gateway

import (
	"context"
	"testing"

	"hookgate/storage"
)

// An endpoint deleted and created again with the same id while a replay
// chooses its targets gets none of the deliveries chosen for the old one
// (here the new one is disabled, so no choice made now would pick it).
// Found reading the change that took the choice out of the registry's
// lock: the write checked only that the id still existed.
func TestReplayDoesNotWriteToAnEndpointRecreatedWhileChoosing(t *testing.T) {
	rcv := newReceiver(t)
	bs := &blockEventListings{entered: make(chan struct{}), release: make(chan struct{})}
	g, job := replayChoosing(t, rcv, bs, "rc")
	if st, _, b := g.api("DELETE", "/endpoints/b", opToken, nil); st != 204 {
		close(bs.release)
		t.Fatalf("DELETE: %d %s", st, b)
	}
	must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{
		"id": "b", "tenant": "acme", "url": rcv.url("b2"), "disabled": true}))
	close(bs.release)
	waitReplay(t, g, acmeToken, job.ID)

	ds, _, err := g.Store().ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: "b", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.State != storage.StateSucceeded && d.State != storage.StateCancelled {
			t.Fatalf("the re-created (disabled) endpoint b got a replayed delivery chosen for the deleted one: %s %s", d.ID, d.State)
		}
	}
}
