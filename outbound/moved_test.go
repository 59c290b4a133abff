package outbound

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

// A 410 Gone says that one URL is gone. An operator who has meanwhile
// pointed the endpoint at another URL (a PATCH while an attempt to the old
// URL was in flight, or before the dispatcher heard of the change) must not
// find the endpoint, with its new URL, disabled by the old URL's answer.
func TestGoneFromOldURLDoesNotDisableEndpointMovedMeanwhile(t *testing.T) {
	db, _ := openDB(t)
	old := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusGone) })
	moved := newReceiver(t, nil)
	ep := testEndpoint(t, db, "moved", old.URL)
	d := startDispatcher(t, db, Config{}, ep)
	// The operator's PATCH reaches the store before the dispatcher hears
	// of it (the gateway tells it right after its write).
	changed := ep
	changed.URL = moved.URL
	if err := db.PutEndpoint(context.Background(), &changed); err != nil {
		t.Fatal(err)
	}
	ds := accept(t, db, event{}, ep)
	d.Notify(ep.ID)
	waitFor(t, wait, "the attempt to the old URL", inState(t, db, ds[0].ID, storage.StateFailed))
	d.Stop(wait) // waits for the attempt goroutine, including its disable

	stored, err := db.GetEndpoint(context.Background(), ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Disabled {
		t.Fatalf("endpoint now pointing at %s was disabled (%q) by a 410 from its previous URL", stored.URL, stored.DisabledReason)
	}
}

// An operator who fixes a failing endpoint's URL expects deliveries to go
// to the new URL now, not after the cool-down the old URL's failures
// earned (up to minutes).
func TestMovingAnEndpointClosesItsCircuit(t *testing.T) {
	db, _ := openDB(t)
	broken := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	fixed := newReceiver(t, nil)
	ep := testEndpoint(t, db, "fixme", broken.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	var ds []storage.Delivery
	for range 3 {
		ds = append(ds, accept(t, db, event{}, ep)...)
	}
	d := startDispatcher(t, db, Config{CircuitFailures: 3, CircuitCooldown: time.Hour}, ep)
	d.Notify(ep.ID)
	waitFor(t, wait, "the circuit to open", func() bool { return circuitOf(d, ep.ID) == circuitOpen })

	ep.URL = fixed.URL
	if err := db.PutEndpoint(context.Background(), &ep); err != nil {
		t.Fatal(err)
	}
	d.UpsertEndpoint(ep)
	if s := circuitOf(d, ep.ID); s != circuitClosed {
		t.Fatalf("circuit %s after the endpoint moved to another URL", s)
	}
	d.Notify(ep.ID)
	for _, dl := range ds {
		waitFor(t, wait, "delivery to the new URL", inState(t, db, dl.ID, storage.StateSucceeded))
	}
}

// TestOldURLProbeDoesNotReopenCircuitOfMovedEndpoint: moving an endpoint
// closes the circuit the old URL opened (loop.update). A half-open probe
// in flight to the old URL at the move must not re-open it when its failure
// comes back: the new URL never failed.
func TestOldURLProbeDoesNotReopenCircuitOfMovedEndpoint(t *testing.T) {
	db, _ := openDB(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	broken := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 4 { // the half-open probe: hangs until the endpoint has moved
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	fixed := newReceiver(t, nil)
	ep := testEndpoint(t, db, "probe", broken.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	var ds []storage.Delivery
	for range 4 {
		ds = append(ds, accept(t, db, event{}, ep)...)
	}
	d := startDispatcher(t, db, Config{CircuitFailures: 3, CircuitCooldown: 300 * time.Millisecond, CircuitMaxCooldown: time.Hour}, ep)
	d.Notify(ep.ID)
	waitFor(t, wait, "the probe to the old URL in flight", func() bool { return broken.count() == 4 && broken.inFlight() == 1 })

	ep.URL = fixed.URL
	if err := db.PutEndpoint(context.Background(), &ep); err != nil {
		t.Fatal(err)
	}
	d.UpsertEndpoint(ep)
	if s := circuitOf(d, ep.ID); s != circuitClosed {
		t.Fatalf("circuit %s right after the move", s)
	}
	unblock()
	total := func() int {
		n := 0
		for _, dl := range ds {
			n += len(attempts(t, db, dl.ID))
		}
		return n
	}
	waitFor(t, wait, "the old URL's probe outcome", func() bool { return total() >= 4 })
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if s := circuitOf(d, ep.ID); s != circuitClosed {
			t.Fatalf("circuit %s after the endpoint moved to a URL that never failed: the old URL's probe re-opened it", s)
		}
		if fixed.count() > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling step
	}
	for _, dl := range ds {
		waitFor(t, wait, "delivery to the new URL", inState(t, db, dl.ID, storage.StateSucceeded))
	}
}

// TestStaleProbeDoesNotFreeTheNewProbeSlot: a half-open probe to an
// endpoint's old URL is still out when the endpoint moves; the new URL
// fails, its circuit opens and goes half-open, and its own probe goes out.
// When the old URL's probe ends, it must not free the probe slot of the
// new URL's probe: the loop would claim a second probe while the first is
// still out.
func TestStaleProbeDoesNotFreeTheNewProbeSlot(t *testing.T) {
	db, _ := openDB(t)
	releaseA, releaseB := make(chan struct{}), make(chan struct{})
	var onceA, onceB sync.Once
	unblockA := func() { onceA.Do(func() { close(releaseA) }) }
	unblockB := func() { onceB.Do(func() { close(releaseB) }) }
	hang := func(ch chan struct{}, r *http.Request) {
		select {
		case <-ch:
		case <-r.Context().Done():
		}
	}
	oldURL := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 2 { // the half-open probe
			hang(releaseA, r)
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	newURL := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError) // opens the circuit again
			return
		}
		hang(releaseB, r)
		w.WriteHeader(http.StatusInternalServerError)
	})
	ep := testEndpoint(t, db, "mover", oldURL.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	for range 10 {
		accept(t, db, event{}, ep)
	}
	d := startDispatcher(t, db, Config{CircuitFailures: 1, CircuitCooldown: 100 * time.Millisecond, CircuitMaxCooldown: time.Hour}, ep)
	t.Cleanup(unblockB)
	t.Cleanup(unblockA)
	d.Notify(ep.ID)
	waitFor(t, wait, "the probe to the old URL in flight", func() bool { return oldURL.count() == 2 && oldURL.inFlight() == 1 })

	ep.URL, ep.MaxInFlight = newURL.URL, 4
	if err := db.PutEndpoint(context.Background(), &ep); err != nil {
		t.Fatal(err)
	}
	d.UpsertEndpoint(ep)
	d.Notify(ep.ID)
	// The new URL: one failure (circuit open), two hanging attempts
	// claimed before it opened, then after the cool-down its probe (the
	// 4th request) hangs.
	waitFor(t, wait, "the new URL's half-open probe in flight", func() bool {
		return newURL.count() == 4 && circuitOf(d, ep.ID) == circuitHalfOpen
	})
	unblockA() // the old URL's probe ends (500)
	waitFor(t, wait, "the old URL's probe to end", func() bool { return oldURL.inFlight() == 0 })
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := newURL.count(); n > 4 {
			t.Fatalf("a second half-open probe (request %d) went to the new URL while its first probe is still in flight: the old URL's probe freed the new one's slot", n)
		}
		time.Sleep(5 * time.Millisecond) // polling step
	}
}
