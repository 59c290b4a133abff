package outbound

import (
	"context"
	"crypto/sha256"
	"net/http"
	"testing"
	"time"

	"hookgate/storage"
)

// TestHandOff: a delivery written claimed under a reserved slot is sent at
// once with the event in hand, the slot limit holds, and an unused
// reservation frees its slot.
func TestHandOff(t *testing.T) {
	db, _ := openDB(t)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		w.WriteHeader(http.StatusOK)
	})
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	d := startDispatcher(t, db, Config{}, ep)
	now, lease := reserveSlot(t, d, "ep")
	leases := []time.Time{lease}
	if again := d.Reserve([]string{"ep"}, now); !again[0].IsZero() {
		t.Fatal("reserved a second slot with max_in_flight 1")
	}
	ds := acceptClaimed(t, db, ep, leases[0], now)
	ev, err := db.GetEvent(context.Background(), ds.Event)
	if err != nil {
		t.Fatal(err)
	}
	d.Hand([]storage.Job{{Delivery: ds, Event: ev}})
	waitFor(t, 5*time.Second, "the handed delivery to arrive", func() bool { return rc.inFlight() == 1 })
	close(release)
	waitFor(t, 5*time.Second, "the delivery to succeed", inState(t, db, ds.ID, storage.StateSucceeded))
	if got := attempts(t, db, ds.ID); len(got) != 1 || got[0].N != 1 {
		t.Fatalf("attempts %+v", got)
	}
	// The slot is free again; an unused reservation gives it back.
	waitFor(t, 5*time.Second, "the slot to free", func() bool {
		l := d.Reserve([]string{"ep"}, time.Now())
		if l[0].IsZero() {
			return false
		}
		d.Unreserve([]string{"ep"})
		return true
	})
	// Unreserve pokes the loop, whose pass may hold the free slot for a
	// moment (reserveSlot): ask until it is free again.
	waitFor(t, 5*time.Second, "the slot Unreserve gave back", func() bool {
		l := d.Reserve([]string{"ep", "unknown"}, time.Now())
		if !l[1].IsZero() {
			t.Fatalf("reserved a slot of an unknown endpoint: %v", l)
		}
		return !l[0].IsZero()
	})
}

// reserveSlot reserves a slot of an idle endpoint for a hand-off and
// returns the time it used and the lease. The loop's own pass holds the
// free slots while its claim is being written, so a Reserve at that moment
// finds none: it tries again until a slot is free.
func reserveSlot(t *testing.T, d *Dispatcher, id string) (now, lease time.Time) {
	t.Helper()
	waitFor(t, 5*time.Second, "a free slot for the hand-off", func() bool {
		now = time.Now().UTC()
		lease = d.Reserve([]string{id}, now)[0]
		return !lease.IsZero()
	})
	return now, lease
}

// acceptClaimed stores an event whose delivery is written claimed under
// lease, as ingest does after a reservation.
func acceptClaimed(t *testing.T, db Store, ep storage.Endpoint, lease, now time.Time) storage.Delivery {
	t.Helper()
	s := db.(storage.Ingester)
	evID := storage.NewID("evt_", now)
	key := storage.IdempotencyKey("acme", "src", evID)
	dl := storage.Delivery{ID: storage.NewID("dlv_", now), Event: evID, Tenant: "acme", Endpoint: ep.ID, IdempotencyKey: key,
		State: storage.StateDelivering, LeaseUntil: lease, CreatedAt: now, NextAttemptAt: now, RetryFrom: now, UpdatedAt: now}
	body := []byte(`{"id":"x"}`)
	_, err := s.Accept(context.Background(), &storage.AcceptRequest{
		Key: storage.DedupeKey{Tenant: "acme", Source: "src", EventID: evID}, BodyHash: sha256.Sum256(body), DedupeUntil: now.Add(time.Hour),
		Event:      storage.Event{ID: evID, Tenant: "acme", Source: "src", EventID: evID, Type: "t", ReceivedAt: now, ContentType: "application/json", Body: body, IdempotencyKey: key},
		Deliveries: []storage.Delivery{dl}, Response: storage.Response{Status: 202},
	})
	if err != nil {
		t.Fatal(err)
	}
	return dl
}
