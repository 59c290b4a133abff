package outbound

import (
	"context"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Deliveries held back by an open circuit fail once their max_elapsed
// has passed, unsent, instead of staying pending until the endpoint is
// back (a failing probe every cool-down, up to 5 minutes apart, fails one
// at a time): SPEC section 4, "after max_attempts or max_elapsed the
// delivery is failed". Those still inside their window stay pending. The
// clock is the dispatcher's, moved by hand.
func TestPausedEndpointFailsDeliveriesPastMaxElapsed(t *testing.T) {
	db, _ := openDB(t)
	d, _, ids, clock, start := pausedDeadEndpoint(t, db, db, Config{})

	// Inside the window (fastRetry: max_elapsed 1h): nothing fails.
	clock.set(start.Add(30 * time.Minute))
	passTwice(t, d, "dead")
	passTwice(t, d, "dead") // the first may have been mid-way through its look at the outbox
	for _, id := range ids {
		if got := delivery(t, db, id); got.State != storage.StatePending {
			t.Fatalf("%s inside its window: %s, want pending", id, got.State)
		}
	}

	clock.set(start.Add(2 * time.Hour))
	passTwice(t, d, "dead")
	for _, id := range ids {
		testsupport.WaitFor(t, 10*time.Second, id+" failed", inState(t, db, id, storage.StateFailed))
	}
	sent, unsent := 0, 0
	for _, id := range ids {
		as := attempts(t, db, id)
		last := as[len(as)-1]
		if last.StatusCode != 0 || !strings.HasPrefix(last.Error, "not sent: ") || !strings.Contains(last.Error, "max_elapsed") {
			t.Errorf("%s: last attempt %+v, want one not sent, naming max_elapsed", id, last)
		}
		sent += len(as) - 1
		if len(as) == 1 {
			unsent++
		}
	}
	if sent != 2 || unsent != 4 {
		t.Errorf("%d requests before the expiry and %d deliveries failed without one, want the 2 that opened the circuit and 4", sent, unsent)
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
	d, ep, _, clock, start := pausedDeadEndpoint(t, db, db, Config{})
	foreign := acceptAs(t, db, "globex", ep, start)
	clock.set(start.Add(2 * time.Hour))
	testsupport.WaitFor(t, 10*time.Second, "the foreign delivery cancelled", func() bool {
		d.Notify("dead")
		return delivery(t, db, foreign.ID).State == storage.StateCancelled
	})
	if as := attempts(t, db, foreign.ID); len(as) != 1 || as[0].StatusCode != 0 {
		t.Fatalf("the foreign delivery's attempts %+v, want one, not sent", as)
	}
}

// claimHookStore is the real store with a hook run at the start of the
// next Claim (once), to change the endpoint while a claim is written.
type claimHookStore struct {
	*badger.DB
	hook atomic.Pointer[func()]
}

func (s *claimHookStore) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	if f := s.hook.Swap(nil); f != nil {
		(*f)()
	}
	return s.DB.Claim(ctx, endpoint, now, limit, lease)
}

// verdictMetrics counts Attempt calls per verdict.
type verdictMetrics struct {
	mu       sync.Mutex
	verdicts map[Verdict]int
}

func (m *verdictMetrics) Attempt(_ string, v Verdict, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.verdicts == nil {
		m.verdicts = map[Verdict]int{}
	}
	m.verdicts[v]++
}
func (m *verdictMetrics) Delivered(string, time.Duration) {}
func (m *verdictMetrics) InFlight(string, int)            {}

// Expired counts as a failure: the delivery failed, unsent.
func (m *verdictMetrics) Expired(string) { m.Attempt("", VerdictFailed, 0) }
func (m *verdictMetrics) count(v Verdict) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.verdicts[v]
}

// pausedDeadEndpoint sets up an endpoint whose circuit opened after two 500s (cool-down 10 h),
// six deliveries due, and a clock moved by hand.
func pausedDeadEndpoint(t *testing.T, store Store, db *badger.DB, cfg Config) (*Dispatcher, storage.Endpoint, []string, *fakeClock, time.Time) {
	t.Helper()
	rc := newReceiver(t, status(500, 1000))
	ep := testEndpoint(t, db, "dead", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	var ids []string
	for range 6 {
		ids = append(ids, accept(t, db, event{body: []byte(`{}`)}, ep)[0].ID)
	}
	start := time.Now()
	clock := &fakeClock{t: start}
	cfg.Now, cfg.CircuitFailures, cfg.CircuitCooldown = clock.Now, 2, 10*time.Hour
	d := startDispatcher(t, store, cfg, ep)
	testsupport.WaitFor(t, 10*time.Second, "two attempts, the circuit open", func() bool {
		n := 0
		for _, id := range ids {
			n += delivery(t, db, id).AttemptCount
		}
		return n == 2
	})
	return d, ep, ids, clock, start
}

// passTwice makes the loop of id plan at least twice more: the pass that
// started after the clock moved has finished.
func passTwice(t *testing.T, d *Dispatcher, id string) {
	t.Helper()
	l := d.endpoints[id]
	target := l.passes.Load() + 2
	testsupport.WaitFor(t, 30*time.Second, "the loop planned twice", func() bool {
		d.Notify(id)
		return l.passes.Load() >= target
	})
}

// An operator disables a dead endpoint while the expiry is writing its
// claim: the endpoint as it is now decides, and a disabled endpoint's
// deliveries stay pending until it is enabled again (README). The same
// holds for a max_elapsed raised by a PATCH, a URL moved, or an operator's
// retry landing mid-way.
func TestPausedExpiryLeavesAnEndpointDisabledDuringItsClaim(t *testing.T) {
	db, _ := openDB(t)
	store := &claimHookStore{DB: db}
	d, ep, ids, clock, start := pausedDeadEndpoint(t, store, db, Config{})

	fired := make(chan struct{})
	disable := func() {
		off := ep
		off.Disabled, off.DisabledReason = true, "operator"
		off.UpdatedAt = ep.UpdatedAt.Add(time.Second)
		d.UpsertEndpoint(off) // what reloadRegistry does after the store's write
		close(fired)
	}
	store.hook.Store(&disable)
	clock.set(start.Add(2 * time.Hour)) // past max_elapsed (1h)
	testsupport.WaitFor(t, 30*time.Second, "the sweep claimed", func() bool {
		d.Notify("dead")
		select {
		case <-fired:
			return true
		default:
			return false
		}
	})
	passTwice(t, d, "dead") // the sweep's pass has finished
	failed := 0
	for _, id := range ids {
		if delivery(t, db, id).State == storage.StateFailed {
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d deliveries of an endpoint disabled during the sweep were failed; want them pending until it is enabled again", failed, len(ids))
	}
}

// Deliveries the expiry fails are counted as failed deliveries
// (Metrics.Expired; hookgate_deliveries_total{result="failed"}): behind a
// dead receiver, the case the expiry is for, an alert on failed
// deliveries must see them.
func TestPausedExpiryIsCounted(t *testing.T) {
	db, _ := openDB(t)
	m := &verdictMetrics{}
	d, _, ids, clock, start := pausedDeadEndpoint(t, db, db, Config{Metrics: m})
	clock.set(start.Add(2 * time.Hour))
	passTwice(t, d, "dead")
	for _, id := range ids {
		testsupport.WaitFor(t, 10*time.Second, id+" failed", inState(t, db, id, storage.StateFailed))
	}
	// Counted once the store has the outcome.
	testsupport.WaitFor(t, 10*time.Second, "every failure counted", func() bool { return m.count(VerdictFailed) >= len(ids) })
	if got := m.count(VerdictFailed); got != len(ids) {
		t.Errorf("failures reported to Metrics: %d, want %d (every delivery failed once)", got, len(ids))
	}
}

// Each look of the expiry takes the MaxClaim (1024) earliest due
// deliveries, and gives those it keeps back due as they were: the oldest
// stay first in line. Given back due "now", behind the rest, a delivery of
// a backlog of N was looked at once every N/1024 looks (a day's backlog at
// 1 event/s failed ~14 hours late, past the retention sweep's margin).
// Here max_elapsed is 10 min (a look every minute) and 10 old deliveries
// expire at +1m30s, before 4,100 younger ones: failed by the look at +2m.
func TestPausedExpiryOfALargeBacklogIsOnTime(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, status(500, 1000000))
	policy := fastRetry
	policy.MaxElapsed = 10 * time.Minute // every = 1 min
	ep := testEndpoint(t, db, "held", rc.URL, func(ep *storage.Endpoint) { ep.Retry = policy })
	start := time.Now()
	clock := &fakeClock{t: start}
	d := startDispatcher(t, db, Config{Now: clock.Now}, ep)
	l := d.endpoints["held"]
	l.mu.Lock()
	l.hold = start.Add(100 * time.Hour) // a paused endpoint (as a Retry-After holds it)
	l.mu.Unlock()
	passTwice(t, d, "held") // a paused pass has swept the (empty) outbox at start

	accept(t, db, event{body: []byte(`{}`)}) // no endpoint: an event to hang the deliveries on
	evs, _, err := db.ListEvents(context.Background(), storage.EventFilter{Tenant: "acme", Limit: 1})
	if err != nil || len(evs) != 1 {
		t.Fatalf("event: %v %v", evs, err)
	}
	ev := evs[0].ID
	mk := func(at time.Time) storage.Delivery {
		return storage.Delivery{
			ID: storage.NewID("dlv_", at), Event: ev, Tenant: "acme", Endpoint: "held",
			IdempotencyKey: evs[0].IdempotencyKey, State: storage.StatePending,
			CreatedAt: at, NextAttemptAt: at, RetryFrom: at, UpdatedAt: at,
		}
	}
	var old []string
	var batch []storage.Delivery
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := db.Enqueue(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		batch = batch[:0]
	}
	for range 10 {
		dl := mk(start.Add(-8*time.Minute - 30*time.Second))
		old = append(old, dl.ID)
		batch = append(batch, dl)
	}
	for range 4100 {
		batch = append(batch, mk(start.Add(-30*time.Second)))
		if len(batch) == 500 {
			flush()
		}
	}
	flush()

	oldPending := func() int {
		n := 0
		for _, id := range old {
			if delivery(t, db, id).State == storage.StatePending {
				n++
			}
		}
		return n
	}
	// The old ones pass max_elapsed at +1m30s; the sweep at +2m is the
	// first to see them expired, +3m leaves a period of slack.
	for k := 1; k <= 3; k++ {
		clock.set(start.Add(time.Duration(k) * time.Minute))
		passTwice(t, d, "held")
	}
	if n := oldPending(); n > 0 {
		t.Errorf("at +3m, %d of %d deliveries past max_elapsed since +1m30s are still pending (want failed by the sweep at +2m, at most one sweep period late)", n, len(old))
	}
	if rc.count() != 0 {
		t.Errorf("the held endpoint got %d requests", rc.count())
	}
}

// slowCompleteStore is the real store whose Complete takes as long as a
// write does on a disk with a 3 ms fsync (every write is its own group
// commit when they come one after another); started is closed at the
// first Complete.
type slowCompleteStore struct {
	*badger.DB
	once    sync.Once
	started chan struct{}
}

func (s *slowCompleteStore) Complete(ctx context.Context, out *storage.Outcome) error {
	s.once.Do(func() { close(s.started) })
	t := time.NewTimer(3 * time.Millisecond) // simulated disk latency, not synchronisation
	<-t.C
	return s.DB.Complete(ctx, out)
}

// Stop (and so the gateway's shutdown, whose grace period bounds it) waits
// for every endpoint loop. The expiry writes its outcomes concurrently (the
// store commits them together) and gives its claim back once stopping:
// one after another, 1,024 outcomes on a disk with a 3 ms fsync held a
// shutdown 3 s past its grace period.
func TestStopDuringAPausedExpiryReturnsPromptly(t *testing.T) {
	db, _ := openDB(t)
	store := &slowCompleteStore{DB: db, started: make(chan struct{})}
	rc := newReceiver(t, status(500, 1000000))
	policy := fastRetry
	policy.MaxElapsed = 10 * time.Minute
	ep := testEndpoint(t, db, "held", rc.URL, func(ep *storage.Endpoint) { ep.Retry = policy })
	start := time.Now()
	clock := &fakeClock{t: start}
	d := startDispatcher(t, store, Config{Now: clock.Now}, ep)
	l := d.endpoints["held"]
	l.mu.Lock()
	l.hold = start.Add(100 * time.Hour)
	l.mu.Unlock()
	passTwice(t, d, "held")

	accept(t, db, event{body: []byte(`{}`)})
	evs, _, err := db.ListEvents(context.Background(), storage.EventFilter{Tenant: "acme", Limit: 1})
	if err != nil || len(evs) != 1 {
		t.Fatalf("event: %v %v", evs, err)
	}
	var batch []storage.Delivery
	for range storage.MaxClaim {
		at := start.Add(-time.Hour) // past max_elapsed
		batch = append(batch, storage.Delivery{ID: storage.NewID("dlv_", at), Event: evs[0].ID, Tenant: "acme", Endpoint: "held",
			State: storage.StatePending, CreatedAt: at, NextAttemptAt: at, RetryFrom: at, UpdatedAt: at})
		if len(batch) == 256 {
			if err := db.Enqueue(context.Background(), batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	clock.set(start.Add(2 * time.Minute))
	d.Notify("held")
	select {
	case <-store.started:
	case <-time.After(20 * time.Second):
		t.Fatal("no sweep")
	}
	t0 := time.Now()
	d.Stop(0)
	if took := time.Since(t0); took > time.Second {
		t.Errorf("Stop(0) during a sweep took %s; want it to return promptly (the loop stops at its context, as a claim does)", took.Round(time.Millisecond))
	}
}

// An operator's POST /deliveries/{id}/retry (store Retry, then RetryNow)
// says the receiver is back: RetryNow closes the circuit, and the
// endpoint's other due deliveries go out with it, also when it lands while
// the paused expiry is writing its claim (the endpoint's settings did not
// change, so only the resume tells): none of them fails unsent.
func TestPausedExpiryYieldsToAResumeDuringItsClaim(t *testing.T) {
	db, _ := openDB(t)
	store := &claimHookStore{DB: db}
	rc := newReceiver(t, status(500, 2)) // two 500s open the circuit; back (200) after
	ep := testEndpoint(t, db, "dead", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	var ids []string
	for range 6 {
		ids = append(ids, accept(t, db, event{body: []byte(`{}`)}, ep)[0].ID)
	}
	start := time.Now()
	clock := &fakeClock{t: start}
	d := startDispatcher(t, store, Config{Now: clock.Now, CircuitFailures: 2, CircuitCooldown: 10 * time.Hour}, ep)
	testsupport.WaitFor(t, 10*time.Second, "two attempts, the circuit open", func() bool {
		return rc.count() == 2 && circuitOf(d, "dead") == circuitOpen
	})
	passTwice(t, d, "dead") // the sweep at start (nothing expired) is over

	fired := make(chan struct{})
	operatorRetry := func() {
		// POST /deliveries/{ids[0]}/retry, as gateway/admin/deliveries.go does it.
		if _, err := db.Retry(context.Background(), ids[0], clock.Now()); err != nil {
			t.Error(err)
		}
		d.RetryNow("dead")
		close(fired)
	}
	store.hook.Store(&operatorRetry)
	clock.set(start.Add(2 * time.Hour)) // past max_elapsed (1h)
	passTwice(t, d, "dead")
	select {
	case <-fired:
	case <-time.After(20 * time.Second):
		t.Fatal("the sweep did not claim")
	}
	testsupport.WaitFor(t, 20*time.Second, "every delivery settled", func() bool {
		d.Notify("dead")
		for _, id := range ids {
			if !delivery(t, db, id).State.Terminal() {
				return false
			}
		}
		return true
	})
	failed := 0
	for _, id := range ids {
		if delivery(t, db, id).State == storage.StateFailed {
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d deliveries failed unsent after the operator resumed the endpoint mid-sweep (receiver answering 200, got %d requests); "+
			"want them sent and delivered, as RetryNow promises", failed, len(ids), rc.count())
	}
}

func TestTokenWait(t *testing.T) {
	poll := time.Second
	for _, tc := range []struct {
		tokens, limit float64
		want          time.Duration
	}{
		{0, 10, 100 * time.Millisecond},
		{0.5, 1, 500 * time.Millisecond},
		{0, 0.5, poll},                      // 2 s away: plan again after poll
		{0, 1e-10, poll},                    // a wait that does not fit in a Duration
		{0, 1e-300, poll},                   // nor in a float64 (+Inf)
		{-5, 1e-300, poll},                  //
		{0.99999999, 1e9, time.Millisecond}, // at least minIdleWait
	} {
		if got := tokenWait(tc.tokens, tc.limit, poll); got != tc.want {
			t.Errorf("tokenWait(%v, %v) = %v, want %v", tc.tokens, tc.limit, got, tc.want)
		}
	}
}

// An endpoint stored before max_in_flight was bounded keeps its value,
// but no more than MaxMaxInFlight attempts go to it at once.
func TestMaxInFlightIsCapped(t *testing.T) {
	for _, c := range []struct{ set, want int }{{0, DefaultMaxInFlight}, {3, 3}, {MaxMaxInFlight, MaxMaxInFlight}, {1 << 30, MaxMaxInFlight}} {
		if got := maxInFlight(&storage.Endpoint{MaxInFlight: c.set}); got != c.want {
			t.Errorf("max_in_flight %d: %d slots, want %d", c.set, got, c.want)
		}
	}
}

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
	testsupport.WaitFor(t, wait, "the attempt to the old URL", inState(t, db, ds[0].ID, storage.StateFailed))
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
	testsupport.WaitFor(t, wait, "the circuit to open", func() bool { return circuitOf(d, ep.ID) == circuitOpen })

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
		testsupport.WaitFor(t, wait, "delivery to the new URL", inState(t, db, dl.ID, storage.StateSucceeded))
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
	testsupport.WaitFor(t, wait, "the probe to the old URL in flight", func() bool { return broken.count() == 4 && broken.inFlight() == 1 })

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
	testsupport.WaitFor(t, wait, "the old URL's probe outcome", func() bool { return total() >= 4 })
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
		testsupport.WaitFor(t, wait, "delivery to the new URL", inState(t, db, dl.ID, storage.StateSucceeded))
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
	testsupport.WaitFor(t, wait, "the probe to the old URL in flight", func() bool { return oldURL.count() == 2 && oldURL.inFlight() == 1 })

	ep.URL, ep.MaxInFlight = newURL.URL, 4
	if err := db.PutEndpoint(context.Background(), &ep); err != nil {
		t.Fatal(err)
	}
	d.UpsertEndpoint(ep)
	d.Notify(ep.ID)
	// The new URL: one failure (circuit open), two hanging attempts
	// claimed before it opened, then after the cool-down its probe (the
	// 4th request) hangs.
	testsupport.WaitFor(t, wait, "the new URL's half-open probe in flight", func() bool {
		return newURL.count() == 4 && circuitOf(d, ep.ID) == circuitHalfOpen
	})
	unblockA() // the old URL's probe ends (500)
	testsupport.WaitFor(t, wait, "the old URL's probe to end", func() bool { return oldURL.inFlight() == 0 })
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := newURL.count(); n > 4 {
			t.Fatalf("a second half-open probe (request %d) went to the new URL while its first probe is still in flight: the old URL's probe freed the new one's slot", n)
		}
		time.Sleep(5 * time.Millisecond) // polling step
	}
}
