package outbound

import (
	"context"
	"crypto/sha256"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"
	"net/http"
	"testing"
	"time"
)

func TestCircuit(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c := &circuit{threshold: 3, minCool: 5 * time.Second, maxCool: 15 * time.Second}
	expect := func(wantN int, wantState circuitState) {
		t.Helper()
		if n, _ := c.allow(now); n != wantN || c.state != wantState {
			t.Fatalf("allow = %d in %s, want %d in %s", n, c.state, wantN, wantState)
		}
	}
	fail := func(probe bool) { c.record(false, probe, now) }

	fail(false)
	fail(false)
	c.record(true, false, now) // a success resets the count
	fail(false)
	fail(false)
	expect(unlimited, circuitClosed)
	fail(false)
	if n, until := c.allow(now); n != 0 || !until.Equal(now.Add(5*time.Second)) {
		t.Fatalf("after 3 failures: allow = %d until %s; want 0 until +5s", n, until)
	}
	fail(false) // an attempt claimed before the circuit opened: ignored
	expect(0, circuitOpen)

	now = now.Add(5 * time.Second)
	expect(1, circuitHalfOpen)
	if !c.claimed(1) {
		t.Fatal("the half-open claim is the probe")
	}
	expect(0, circuitHalfOpen) // one probe at a time
	fail(true)
	if _, until := c.allow(now); !until.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("a failed probe reopens with a doubled cool-down, until %s", until)
	}
	now = now.Add(10 * time.Second)
	expect(1, circuitHalfOpen)
	c.claimed(1)
	fail(true)
	if _, until := c.allow(now); !until.Equal(now.Add(15 * time.Second)) {
		t.Fatalf("the cool-down is capped at maxCool, until %s", until)
	}
	now = now.Add(15 * time.Second)
	expect(1, circuitHalfOpen)
	c.claimed(1)
	if from, to := c.record(true, true, now); from != circuitHalfOpen || to != circuitClosed {
		t.Fatalf("a successful probe: %s -> %s", from, to)
	}
	expect(unlimited, circuitClosed)
	for range 3 {
		fail(false)
	}
	if _, until := c.allow(now); !until.Equal(now.Add(5 * time.Second)) {
		t.Fatal("after closing, the cool-down starts over")
	}
}

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
	_, err := db.Ingest(context.Background(), &storage.IngestRequest{
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
// l.record (its first version): when that delivery was the
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
	testsupport.WaitFor(t, 5*time.Second, "the circuit to open after the first failure", func() bool {
		return circuitOf(d, ep.ID) == circuitOpen
	})
	// An acme delivery left for "shared", due long ago: first in line.
	foreign := acceptAs(t, db, "acme", ep, time.Now().UTC().Add(-time.Hour))
	testsupport.WaitFor(t, 5*time.Second, "the foreign delivery to be cancelled (by the probe)",
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
