package outbound

import (
	"context"
	"strings"
	"testing"
	"time"

	"hookgate/storage"
)

// Deliveries held back by an open circuit fail once their max_elapsed
// has passed, unsent, instead of staying pending until the endpoint is
// back (a failing probe every cool-down, up to 5 minutes apart, fails one
// at a time): SPEC section 4, "after max_attempts or max_elapsed the
// delivery is failed". Those still inside their window stay pending. The
// clock is the dispatcher's, moved by hand.
func TestPausedEndpointFailsDeliveriesPastMaxElapsed(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, status(500, 1000))
	ep := testEndpoint(t, db, "dead", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	var ids []string
	for range 6 {
		ids = append(ids, accept(t, db, event{body: []byte(`{}`)}, ep)[0].ID)
	}
	start := time.Now()
	clock := &fakeClock{t: start}
	// Two failures open the circuit; its cool-down outlasts the test, so
	// no probe is sent.
	d := startDispatcher(t, db, Config{Now: clock.Now, CircuitFailures: 2, CircuitCooldown: 10 * time.Hour}, ep)
	waitFor(t, 10*time.Second, "two attempts, the circuit open", func() bool {
		n := 0
		for _, id := range ids {
			n += delivery(t, db, id).AttemptCount
		}
		return n == 2
	})
	pass := func() {
		t.Helper()
		l := d.endpoints["dead"]
		target := l.passes.Load() + 2
		d.Notify("dead")
		waitFor(t, 10*time.Second, "the loop planned twice", func() bool {
			d.Notify("dead")
			return l.passes.Load() >= target
		})
	}

	// Inside the window (fastRetry: max_elapsed 1h): nothing fails.
	clock.set(start.Add(30 * time.Minute))
	pass()
	pass() // the first may have been mid-way through its look at the outbox
	for _, id := range ids {
		if got := delivery(t, db, id); got.State != storage.StatePending {
			t.Fatalf("%s inside its window: %s, want pending", id, got.State)
		}
	}

	clock.set(start.Add(2 * time.Hour))
	pass()
	for _, id := range ids {
		waitFor(t, 10*time.Second, id+" failed", inState(t, db, id, storage.StateFailed))
	}
	if n := rc.count(); n != 2 {
		t.Fatalf("the paused endpoint got %d requests, want the 2 that opened its circuit", n)
	}
	unsent := 0
	for _, id := range ids {
		as := attempts(t, db, id)
		last := as[len(as)-1]
		if last.StatusCode != 0 || !strings.HasPrefix(last.Error, "not sent: ") || !strings.Contains(last.Error, "max_elapsed") {
			t.Errorf("%s: last attempt %+v, want one not sent, naming max_elapsed", id, last)
		}
		if len(as) == 1 {
			unsent++
		}
	}
	if unsent != 4 {
		t.Errorf("%d deliveries failed without a request, want 4", unsent)
	}
	// Failed, they are replayable: a retry makes one due again.
	if _, err := db.Retry(context.Background(), ids[0], clock.Now()); err != nil {
		t.Fatal(err)
	}
}

// A delivery of another tenant left in a paused endpoint's outbox (the
// endpoint id was deleted and taken by another tenant) is cancelled
// unsent by the expiry, as an attempt would cancel it: never failed, which
// would make it retryable in its tenant's view.
func TestPausedEndpointCancelsAForeignDelivery(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, status(500, 1000))
	ep := testEndpoint(t, db, "dead", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	for range 2 {
		accept(t, db, event{body: []byte(`{}`)}, ep)
	}
	start := time.Now()
	clock := &fakeClock{t: start}
	d := startDispatcher(t, db, Config{Now: clock.Now, CircuitFailures: 2, CircuitCooldown: 10 * time.Hour}, ep)
	waitFor(t, 10*time.Second, "the circuit open", func() bool { return rc.count() == 2 && circuitOf(d, "dead") == circuitOpen })
	foreign := acceptAs(t, db, "globex", ep, start)
	clock.set(start.Add(2 * time.Hour))
	waitFor(t, 10*time.Second, "the foreign delivery cancelled", func() bool {
		d.Notify("dead")
		return delivery(t, db, foreign.ID).State == storage.StateCancelled
	})
	if n := rc.count(); n != 2 {
		t.Fatalf("the paused endpoint got %d requests, want 2", n)
	}
}
