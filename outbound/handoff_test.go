package outbound

import (
	"context"
	"crypto/sha256"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"
	"net/http"
	"sync"
	"testing"
	"time"
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
	testsupport.WaitFor(t, 5*time.Second, "the handed delivery to arrive", func() bool { return rc.inFlight() == 1 })
	close(release)
	testsupport.WaitFor(t, 5*time.Second, "the delivery to succeed", inState(t, db, ds.ID, storage.StateSucceeded))
	if got := attempts(t, db, ds.ID); len(got) != 1 || got[0].N != 1 {
		t.Fatalf("attempts %+v", got)
	}
	// The slot is free again; an unused reservation gives it back.
	testsupport.WaitFor(t, 5*time.Second, "the slot to free", func() bool {
		l := d.Reserve([]string{"ep"}, time.Now())
		if l[0].IsZero() {
			return false
		}
		d.Unreserve([]string{"ep"})
		return true
	})
	// Unreserve pokes the loop, whose pass may hold the free slot for a
	// moment (reserveSlot): ask until it is free again.
	testsupport.WaitFor(t, 5*time.Second, "the slot Unreserve gave back", func() bool {
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
	testsupport.WaitFor(t, 5*time.Second, "a free slot for the hand-off", func() bool {
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
	_, err := s.Ingest(context.Background(), &storage.IngestRequest{
		Key: storage.DedupeKey{Tenant: "acme", Source: "src", EventID: evID}, BodyHash: sha256.Sum256(body), DedupeUntil: now.Add(time.Hour),
		Event:      storage.Event{ID: evID, Tenant: "acme", Source: "src", EventID: evID, Type: "t", ReceivedAt: now, ContentType: "application/json", Body: body, IdempotencyKey: key},
		Deliveries: []storage.Delivery{dl}, Response: storage.Response{Status: 202},
	})

	if err != nil {
		t.Fatal(err)
	}
	return dl
}

// gatedClaimStore is the real store whose first Claim waits, after the
// endpoint loop has planned it, until the test opens the gate: the window
// between a loop's plan and its claim, in which an ingest may reserve.
type gatedClaimStore struct {
	*badger.DB
	once    sync.Once
	entered chan struct{}
	gate    chan struct{}
}

func newGatedClaimStore(db *badger.DB) *gatedClaimStore {
	return &gatedClaimStore{DB: db, entered: make(chan struct{}), gate: make(chan struct{})}
}

func (s *gatedClaimStore) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.entered)
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.DB.Claim(ctx, endpoint, now, limit, lease)
}

// loopInFlight is the slot count of an endpoint's loop.
func loopInFlight(d *Dispatcher, id string) int {
	d.mu.RLock()
	l := d.endpoints[id]
	d.mu.RUnlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}

// loopPasses is how many planning passes an endpoint's loop has made.
func loopPasses(d *Dispatcher, id string) int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.endpoints[id].passes.Load()
}

// TestReserveDuringClaimKeepsMaxInFlight (a bug found and fixed): an ingest hand-off that
// reserves while the endpoint loop is claiming (plan done, Claim not yet
// returned) takes a slot the loop has already planned to fill: with
// max_in_flight 1 two attempts run at once.
func TestReserveDuringClaimKeepsMaxInFlight(t *testing.T) {
	db, _ := openDB(t)
	rc, release := hangingReceiver(t)
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	pending := accept(t, db, event{}, ep) // due now: the loop plans to claim it
	gs := newGatedClaimStore(db)
	d := startDispatcher(t, gs, Config{}, ep)
	t.Cleanup(release)

	<-gs.entered // the loop planned one claim into the only slot
	now := time.Now().UTC()
	leases := d.Reserve([]string{"ep"}, now)
	if leases[0].IsZero() {
		close(gs.gate)
		return // no slot for the hand-off: max_in_flight holds
	}
	handed := acceptClaimed(t, db, ep, leases[0], now)
	ev, err := db.GetEvent(context.Background(), handed.Event)
	if err != nil {
		t.Fatal(err)
	}
	d.Hand([]storage.Job{{Delivery: handed, Event: ev}})
	testsupport.WaitFor(t, 5*time.Second, "the handed delivery to arrive", func() bool { return rc.inFlight() == 1 })
	close(gs.gate)
	// The next planning pass starts only after the gated pass has
	// accounted for what its claim took.
	testsupport.WaitFor(t, 5*time.Second, "the loop's next pass", func() bool { return loopPasses(d, "ep") >= 2 })
	_ = pending
	if n := loopInFlight(d, "ep"); n > 1 {
		testsupport.WaitFor(t, 5*time.Second, "both requests at the receiver", func() bool { return rc.inFlight() == 2 })
		t.Fatalf("max_in_flight 1, but %d attempts in flight (receiver has %d requests at once): the hand-off's Reserve took the slot the loop's claim had planned", n, rc.inFlight())
	}
}

// TestReserveDuringClaimKeepsRateLimit (a bug found and fixed): the same window breaks
// rate_limit: with 1 attempt/s (burst 1) the loop's claim and the hand-off
// both use the one token, and two attempts go out within milliseconds.
func TestReserveDuringClaimKeepsRateLimit(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.RateLimit = 1; ep.MaxInFlight = 10 })
	accept(t, db, event{}, ep)
	gs := newGatedClaimStore(db)
	d := startDispatcher(t, gs, Config{}, ep)

	<-gs.entered // the loop planned a claim with the one token
	now := time.Now().UTC()
	leases := d.Reserve([]string{"ep"}, now)
	if leases[0].IsZero() {
		close(gs.gate)
		return
	}
	handed := acceptClaimed(t, db, ep, leases[0], now)
	ev, err := db.GetEvent(context.Background(), handed.Event)
	if err != nil {
		t.Fatal(err)
	}
	d.Hand([]storage.Job{{Delivery: handed, Event: ev}})
	close(gs.gate)
	testsupport.WaitFor(t, 5*time.Second, "both deliveries to arrive", func() bool { return rc.count() == 2 })
	gap := rc.request(1).at.Sub(rc.request(0).at)
	if gap < 900*time.Millisecond {
		t.Fatalf("rate_limit 1/s (burst 1): two attempts %s apart", gap)
	}
}

// TestHandDoesNotSendToADisabledEndpoint (a bug found and fixed): an endpoint disabled (PATCH
// disabled:true, applied to the dispatcher) between an ingest's Reserve
// and its Hand still receives the handed delivery: Hand reads the new
// settings (Disabled included) and sends anyway.
func TestHandDoesNotSendToADisabledEndpoint(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "ep", rc.URL)
	d := startDispatcher(t, db, Config{}, ep)
	now, lease := reserveSlot(t, d, "ep")
	handed := acceptClaimed(t, db, ep, lease, now)
	ev, err := db.GetEvent(context.Background(), handed.Event)
	if err != nil {
		t.Fatal(err)
	}
	off := ep
	off.Disabled, off.DisabledReason = true, "disabled by the operator"
	d.UpsertEndpoint(off) // what the admin PATCH's registry reload does
	d.Hand([]storage.Job{{Delivery: handed, Event: ev}})
	testsupport.WaitFor(t, 5*time.Second, "the handed delivery to be sent or put back", func() bool {
		dl := delivery(t, db, handed.ID)
		return rc.count() > 0 || dl.State != storage.StateDelivering || !dl.LeaseUntil.Equal(handed.LeaseUntil)
	})
	if n := rc.count(); n > 0 {
		t.Fatalf("the disabled endpoint received %d request(s) after it was disabled; delivery state %s",
			n, delivery(t, db, handed.ID).State)
	}
}

// hangingReceiver answers 200 only when its request is cancelled or once
// release is called: attempts to it stay in flight. Register release as a
// cleanup after starting the dispatcher, so that it runs before the
// dispatcher's Stop waits for those attempts.
func hangingReceiver(t *testing.T) (rc *receiver, release func()) {
	stop := make(chan struct{})
	rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	})
	var once sync.Once
	return rc, func() { once.Do(func() { close(stop) }) }
}

// TestHandDoesNotOutliveItsLease (a bug found and fixed): the lease of a handed
// delivery is computed by Reserve from the endpoint's timeout then, but
// Hand sends with the endpoint's settings at Hand time. A timeout raised
// in between (PATCH timeout) lets the attempt outlive its lease; the loop
// then claims the delivery again while the first attempt is still
// running, and the endpoint gets it twice at once.
func TestHandDoesNotOutliveItsLease(t *testing.T) {
	db, _ := openDB(t)
	rc, release := hangingReceiver(t)
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Timeout = time.Second })
	d := startDispatcher(t, db, Config{}, ep)
	t.Cleanup(release)

	now, lease := reserveSlot(t, d, "ep")
	handed := acceptClaimed(t, db, ep, lease, now)
	ev, err := db.GetEvent(context.Background(), handed.Event)
	if err != nil {
		t.Fatal(err)
	}
	longer := ep
	longer.Timeout = time.Hour // PATCH {"timeout":"1h"} between the write and the hand-off
	d.UpsertEndpoint(longer)
	d.Hand([]storage.Job{{Delivery: handed, Event: ev}})
	testsupport.WaitFor(t, 5*time.Second, "the handed delivery to arrive", func() bool { return rc.count() == 1 })
	// It was not sent under the lease made for the 1s timeout: Hand put it
	// back and the loop claimed it under one that covers the 1h timeout,
	// so no later claim can send it again while this attempt runs.
	got := delivery(t, db, handed.ID)
	if got.State != storage.StateDelivering || got.LeaseUntil.Before(now.Add(time.Hour)) {
		t.Fatalf("delivery %s, lease %s after the reservation: sent under a lease shorter than its 1h timeout",
			got.State, got.LeaseUntil.Sub(now))
	}
}

// TestHandDoesNotSendWhileTheCircuitIsOpen (a bug found and fixed): the circuit opens between an
// ingest's Reserve and its Hand; Hand sends the delivery anyway, spending
// one of its attempts on an endpoint the circuit has paused.
func TestHandDoesNotSendWhileTheCircuitIsOpen(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusInternalServerError) })
	ep := testEndpoint(t, db, "ep", rc.URL)
	d := startDispatcher(t, db, Config{CircuitFailures: 1, CircuitCooldown: time.Hour}, ep)
	now, lease := reserveSlot(t, d, "ep")
	handed := acceptClaimed(t, db, ep, lease, now)
	ev, err := db.GetEvent(context.Background(), handed.Event)
	if err != nil {
		t.Fatal(err)
	}
	// Meanwhile another delivery fails: the circuit opens for an hour.
	other := accept(t, db, event{}, ep)
	d.Notify("ep")
	testsupport.WaitFor(t, 5*time.Second, "the circuit to open", func() bool {
		d.mu.RLock()
		l := d.endpoints["ep"]
		d.mu.RUnlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.circuit.state == circuitOpen && len(attempts(t, db, other[0].ID)) == 1
	})
	d.Hand([]storage.Job{{Delivery: handed, Event: ev}})
	testsupport.WaitFor(t, 5*time.Second, "the handed delivery to be sent or put back", func() bool {
		dl := delivery(t, db, handed.ID)
		return rc.count() > 1 || dl.State != storage.StateDelivering || !dl.LeaseUntil.Equal(handed.LeaseUntil)
	})
	if n := rc.count(); n > 1 {
		testsupport.WaitFor(t, 5*time.Second, "the attempt to be recorded", func() bool { return len(attempts(t, db, handed.ID)) == 1 })
		t.Fatalf("the paused endpoint (circuit open for 1h) got the handed delivery; it spent attempt %d: %+v",
			len(attempts(t, db, handed.ID)), attempts(t, db, handed.ID)[0].Error)
	}
}
