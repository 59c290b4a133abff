package outbound

import (
	"context"
	"crypto/sha256"
	"net/http"
	"testing"
	"time"

	"hookgate/storage"
	"hookgate/storage/badger"
)

// acceptAs stores one event of tenant with one pending delivery to ep,
// due at due.
func acceptAs(t *testing.T, db *badger.DB, tenant string, ep storage.Endpoint, due time.Time) storage.Delivery {
	t.Helper()
	now := time.Now().UTC()
	body := []byte(`{"id":"x"}`)
	evID := storage.NewID("evt_", now)
	key := storage.IdempotencyKey(tenant, "src", "p_"+evID)
	d := storage.Delivery{
		ID: storage.NewID("dlv_", now), Event: evID, Tenant: tenant, Endpoint: ep.ID,
		IdempotencyKey: key, State: storage.StatePending,
		CreatedAt: now, NextAttemptAt: due, RetryFrom: now, UpdatedAt: now,
	}
	_, err := db.Accept(context.Background(), &storage.AcceptRequest{
		Key: storage.DedupeKey{Tenant: tenant, Source: "src", EventID: "p_" + evID}, BodyHash: sha256.Sum256(body),
		DedupeUntil: now.Add(time.Hour),
		Event: storage.Event{ID: evID, Tenant: tenant, Source: "src", EventID: "p_" + evID, Type: "t",
			ReceivedAt: now, ContentType: "application/json", Body: body, IdempotencyKey: key},
		Deliveries: []storage.Delivery{d},
		Response:   storage.Response{Status: http.StatusAccepted, Body: []byte(`{}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// attempt returned early for a foreign delivery (cancelForeign) without
// l.record (first version of 2026-11-29): when that delivery was the
// half-open circuit's probe, circuit.probing stayed true for good, allow answered 0 forever, and the
// endpoint never claimed again (until a restart or an operator's edit).
// Foreign deliveries sort first in the outbox (they are old), so the
// probe is likely to be one.
//
// globex's endpoint fails once (the circuit opens, threshold 1); an old
// delivery of acme's sits in its outbox; the probe after the cool-down
// takes it and cancels it; globex's own delivery must still go out.
func TestForeignProbeDoesNotWedgeTheCircuit(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, status(http.StatusInternalServerError, 1))
	ep := testEndpoint(t, db, "shared", rc.URL, func(ep *storage.Endpoint) { ep.Tenant = "globex" })
	own := acceptAs(t, db, "globex", ep, time.Now().UTC())
	d := startDispatcher(t, db, Config{CircuitFailures: 1, CircuitCooldown: time.Second}, ep)
	d.Notify()
	waitFor(t, 5*time.Second, "the circuit to open after the first failure", func() bool {
		return circuitOf(d, ep.ID) == circuitOpen
	})
	// An acme delivery left for "shared", due long ago: first in line.
	foreign := acceptAs(t, db, "acme", ep, time.Now().UTC().Add(-time.Hour))
	waitFor(t, 5*time.Second, "the foreign delivery to be cancelled (by the probe)",
		inState(t, db, foreign.ID, storage.StateCancelled))
	deadline := time.Now().Add(6 * time.Second)
	for delivery(t, db, own.ID).State != storage.StateSucceeded {
		if time.Now().After(deadline) {
			l, _ := endpointLoopOf(d, ep.ID)
			l.mu.Lock()
			st, probing := l.circuit.state, l.circuit.probing
			l.mu.Unlock()
			t.Fatalf("globex's own delivery is %s after 6s (receiver got %d requests, would answer 200); circuit %s, probing=%v: "+
				"the cancelled foreign probe never reported back",
				delivery(t, db, own.ID).State, rc.count(), st, probing)
		}
		d.Notify(ep.ID)
		time.Sleep(5 * time.Millisecond) // polling step
	}
}
