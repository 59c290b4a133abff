package outbound

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"
)

// Faulty receivers: real HTTP servers that fail the way real subscribers
// do (random 500s, hangs, resets, throttling, outages), against a real
// Badger outbox. Every test checks the user-visible contract: a delivery
// ends succeeded, or failed exactly when its retry policy says, and the
// attempts the store recorded are exactly the requests the receiver saw.

// faultsConfig is the dispatcher config of these tests: the circuit still
// opens after consecutive failures, but pauses for milliseconds.
var faultsConfig = Config{CircuitCooldown: 10 * time.Millisecond, CircuitMaxCooldown: 40 * time.Millisecond}

// faultSeed makes the random receivers reproducible: a receiver's answer
// is a function of (seed, Idempotency-Key, attempt number), whatever
// order concurrent requests arrive in.
const faultSeed = 20260101

// heard is one request a faulty receiver got, and what it did with it.
type heard struct {
	attempt int // its hookgate-attempt header
	answer  int // the status answered; 0 = none (reset, hang)
}

// ledger records, per Idempotency-Key, every request a receiver got, in
// arrival order.
type ledger struct {
	mu    sync.Mutex
	byKey map[string][]heard
}

func newLedger() *ledger { return &ledger{byKey: map[string][]heard{}} }

// note records a request; it returns the request's attempt number and
// its Idempotency-Key.
func (l *ledger) note(r *http.Request, answer int) (int, string) {
	key := r.Header.Get(HeaderIdempotencyKey)
	n, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byKey[key] = append(l.byKey[key], heard{attempt: n, answer: answer})
	return n, key
}

func (l *ledger) of(key string) []heard {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]heard(nil), l.byKey[key]...)
}

// coin is the seeded decision of a random receiver for one attempt of the
// delivery numbered ordinal: true with probability pct/100.
func coin(ordinal, attempt, pct int) bool {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", ordinal, attempt)
	return rand.New(rand.NewPCG(faultSeed, h.Sum64())).IntN(100) < pct
}

// ordinals numbers deliveries by their Idempotency-Key, so that a random
// receiver decides the same way whatever the (random) keys are.
type ordinals struct {
	mu sync.Mutex
	m  map[string]int
}

func (o *ordinals) set(ds []storage.Delivery) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m = map[string]int{}
	for i, d := range ds {
		o.m[d.IdempotencyKey] = i
	}
}

func (o *ordinals) of(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[key]
}

// resetConn hijacks the request's connection and closes it with a TCP RST.
func resetConn(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.(*net.TCPConn).SetLinger(0)
	_ = conn.Close()
}

// settled is a condition for waitFor: every delivery is in a final state.
func settled(t testing.TB, db *badger.DB, ds []storage.Delivery) func() bool {
	return func() bool {
		for _, d := range ds {
			if !delivery(t, db, d.ID).State.Terminal() {
				return false
			}
		}
		return true
	}
}

// checkAgainstLedger asserts that a final delivery's state and attempts
// are exactly what its receiver saw and what the policy allows:
//   - one attempt record per request, in order, numbered 1..n as the
//     hookgate-attempt header said, with the status the receiver answered;
//   - succeeded iff the last answer was 2xx (and no request came after it);
//   - failed iff every answer failed and the budget is spent: n equals
//     max_attempts, or the last attempt's error names max_elapsed.
func checkAgainstLedger(t *testing.T, db *badger.DB, l *ledger, p storage.RetryPolicy, d storage.Delivery) {
	t.Helper()
	got := delivery(t, db, d.ID)
	as := attempts(t, db, d.ID)
	saw := withoutTransportResends(l.of(d.IdempotencyKey))
	if len(as) != len(saw) || got.AttemptCount != len(as) {
		t.Fatalf("delivery %s: %d attempt records (attempt_count %d), but the receiver saw %d requests %+v",
			d.ID, len(as), got.AttemptCount, len(saw), saw)
	}
	for i, a := range as {
		if a.N != i+1 || saw[i].attempt != i+1 || a.StatusCode != saw[i].answer {
			t.Fatalf("delivery %s attempt %d: recorded n=%d status=%d, receiver saw attempt %d answered %d",
				d.ID, i+1, a.N, a.StatusCode, saw[i].attempt, saw[i].answer)
		}
		if ok := a.StatusCode >= 200 && a.StatusCode < 300; ok != (a.Error == "") {
			t.Fatalf("delivery %s attempt %d: status %d with error %q", d.ID, a.N, a.StatusCode, a.Error)
		}
	}
	last := as[len(as)-1]
	switch got.State {
	case storage.StateSucceeded:
		if last.StatusCode < 200 || last.StatusCode > 299 {
			t.Fatalf("delivery %s succeeded, but its last answer was %d", d.ID, last.StatusCode)
		}
		if len(as) > p.MaxAttempts {
			t.Fatalf("delivery %s made %d attempts, max_attempts is %d", d.ID, len(as), p.MaxAttempts)
		}
	case storage.StateFailed:
		for _, a := range as {
			if a.StatusCode >= 200 && a.StatusCode < 300 {
				t.Fatalf("delivery %s failed although attempt %d got %d", d.ID, a.N, a.StatusCode)
			}
		}
		byAttempts := len(as) == p.MaxAttempts && strings.Contains(last.Error, "max_attempts")
		byElapsed := len(as) < p.MaxAttempts && strings.Contains(last.Error, "max_elapsed")
		if !byAttempts && !byElapsed {
			t.Fatalf("delivery %s failed after %d attempts (max_attempts %d), last error %q: not what the policy says",
				d.ID, len(as), p.MaxAttempts, last.Error)
		}
	default:
		t.Fatalf("delivery %s is %s, want a final state", d.ID, got.State)
	}
}

// withoutTransportResends drops the requests net/http resent by itself: a
// request on a reused keep-alive connection that failed before any answer
// (answer 0) is sent again on a new connection, with the same
// Idempotency-Key and hookgate-attempt, within the same attempt. That keeps
// a stale pooled connection from costing an attempt; the receiver sees the
// same delivery twice, which its Idempotency-Key makes harmless.
func withoutTransportResends(saw []heard) []heard {
	var out []heard
	for i, s := range saw {
		if s.answer == 0 && i+1 < len(saw) && saw[i+1].attempt == s.attempt {
			continue
		}
		out = append(out, s)
	}
	return out
}

// acceptN stores n events for the endpoint and returns their deliveries.
func acceptN(t *testing.T, db *badger.DB, n int, ep storage.Endpoint) []storage.Delivery {
	t.Helper()
	var ds []storage.Delivery
	for i := range n {
		ds = append(ds, accept(t, db, event{body: fmt.Appendf(nil, `{"n":%d}`, i)}, ep)...)
	}
	return ds
}

// TestFaultsRandomServerErrors: a receiver answering 500 at random (seeded
// per delivery and attempt). With max_attempts 3, each delivery ends
// succeeded if one of its first three answers was a 200 and failed after
// exactly three 500s; with a generous budget every delivery succeeds.
func TestFaultsRandomServerErrors(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxAttempts int
	}{{"bounded", 3}, {"generous", 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := openDB(t)
			l := newLedger()
			var ord ordinals
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				attempt, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
				code := http.StatusOK
				if coin(ord.of(r.Header.Get(HeaderIdempotencyKey)), attempt, 60) {
					code = http.StatusInternalServerError
				}
				l.note(r, code)
				w.WriteHeader(code)
			})
			ep := testEndpoint(t, db, "flaky", rc.URL, func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = tc.maxAttempts })
			ds := acceptN(t, db, 30, ep)
			ord.set(ds)
			startDispatcher(t, db, faultsConfig, ep).Notify()
			testsupport.WaitFor(t, wait, "every delivery to settle", settled(t, db, ds))

			outcomes := map[storage.DeliveryState]int{}
			ofDeliveries := 0
			for _, d := range ds {
				checkAgainstLedger(t, db, l, ep.Retry, d)
				outcomes[delivery(t, db, d.ID).State]++
				ofDeliveries += len(l.of(d.IdempotencyKey))
			}
			// Every request the server got carried the Idempotency-Key of
			// one of the deliveries (checked above against the store).
			if ofDeliveries != rc.count() {
				t.Fatalf("%d of the server's %d requests carry a delivery's Idempotency-Key", ofDeliveries, rc.count())
			}
			t.Logf("seed %d: %v after %d requests", faultSeed, outcomes, rc.count())
			if tc.maxAttempts == 1000 && outcomes[storage.StateSucceeded] != len(ds) {
				t.Fatalf("outcomes %v: every delivery must succeed within a generous budget", outcomes)
			}
			if tc.maxAttempts == 3 && (outcomes[storage.StateFailed] == 0 || outcomes[storage.StateSucceeded] == 0) {
				t.Fatalf("outcomes %v: with this seed both outcomes occur; the test no longer exercises both", outcomes)
			}
		})
	}
}

// TestFaultsReceiverTimesOut: a receiver that never answers. Each attempt
// ends at the endpoint's timeout, is recorded as a timeout without a
// status, and the delivery fails after exactly max_attempts; a receiver
// that hangs twice and then answers gets the delivery on attempt 3.
func TestFaultsReceiverTimesOut(t *testing.T) {
	db, _ := openDB(t)
	l := newLedger()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		attempt, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
		if r.URL.Path == "/recovers" && attempt > 2 {
			l.note(r, http.StatusOK)
			return
		}
		l.note(r, 0)
		<-r.Context().Done() // hang until the gateway gives up
	})
	const timeout = 100 * time.Millisecond
	hang := testEndpoint(t, db, "hang", rc.URL+"/hang", func(ep *storage.Endpoint) {
		ep.Timeout, ep.Retry.MaxAttempts = timeout, 3
	})
	recovers := testEndpoint(t, db, "recovers", rc.URL+"/recovers", func(ep *storage.Endpoint) { ep.Timeout = timeout })
	ds := append(acceptN(t, db, 2, hang), acceptN(t, db, 1, recovers)...)
	startDispatcher(t, db, faultsConfig, hang, recovers).Notify()
	testsupport.WaitFor(t, wait, "every delivery to settle", settled(t, db, ds))

	for i, d := range ds {
		p := hang.Retry
		if i == 2 {
			p = recovers.Retry
		}
		checkAgainstLedger(t, db, l, p, d)
		as := attempts(t, db, d.ID)
		for _, a := range as[:2] {
			if !strings.Contains(a.Error, "timeout after 100ms") || a.Latency < timeout {
				t.Fatalf("attempt %+v: want a timeout of at least %s", a, timeout)
			}
		}
	}
	for i, want := range []storage.DeliveryState{storage.StateFailed, storage.StateFailed, storage.StateSucceeded} {
		if got := delivery(t, db, ds[i].ID).State; got != want {
			t.Fatalf("delivery %d is %s, want %s", i, got, want)
		}
	}
}

// resetReceiver resets the TCP connection after reading the request
// (paths /reset always, /twice on attempts 1-2) or after writing half a
// status line (/half, attempts 1-2), and answers 200 otherwise. keepAlive
// false closes the connection after every 200, so every attempt dials a
// fresh one.
func resetReceiver(t *testing.T, l *ledger, keepAlive bool) *receiver {
	return newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		attempt, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
		switch {
		case r.URL.Path == "/ok":
		case r.URL.Path == "/half" && attempt <= 2:
			l.note(r, 0)
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			_, _ = buf.WriteString("HTTP/1.1 20")
			_ = buf.Flush()
			_ = conn.(*net.TCPConn).SetLinger(0)
			_ = conn.Close()
			return
		case r.URL.Path == "/reset" || (r.URL.Path == "/twice" && attempt <= 2):
			l.note(r, 0)
			resetConn(w)
			return
		}
		l.note(r, http.StatusOK)
		if !keepAlive {
			w.Header().Set("Connection", "close")
		}
	})
}

// checkResets runs three deliveries to each of the reset receiver's paths
// and checks them against what the receiver saw: /ok, /half and /twice
// succeed (on attempt 1, 3 and 3), /reset fails at max_attempts; no reset
// is a success, each is one attempt with an error and no status.
func checkResets(t *testing.T, keepAlive bool) {
	db, _ := openDB(t)
	l := newLedger()
	rc := resetReceiver(t, l, keepAlive)
	eps := map[string]storage.Endpoint{}
	var list []storage.Endpoint
	for _, id := range []string{"ok", "half", "twice", "reset"} {
		eps[id] = testEndpoint(t, db, id, rc.URL+"/"+id, func(ep *storage.Endpoint) {
			ep.Retry.MaxAttempts, ep.MaxInFlight = 3, 1
		})
		list = append(list, eps[id])
	}
	var ds []storage.Delivery
	for range 3 {
		for _, ep := range list {
			ds = append(ds, accept(t, db, event{}, ep)...)
		}
	}
	startDispatcher(t, db, faultsConfig, list...).Notify()
	testsupport.WaitFor(t, wait, "every delivery to settle", settled(t, db, ds))

	for _, d := range ds {
		checkAgainstLedger(t, db, l, eps[d.Endpoint].Retry, d)
		want := storage.StateSucceeded
		if d.Endpoint == "reset" {
			want = storage.StateFailed
		}
		if got := delivery(t, db, d.ID); got.State != want {
			t.Fatalf("delivery to %s is %s, want %s", d.Endpoint, got.State, want)
		}
		for _, a := range attempts(t, db, d.ID) {
			if a.StatusCode == 0 && (a.Error == "" || strings.Contains(a.Error, rc.URL)) {
				t.Fatalf("reset attempt %+v: want an error, without the URL", a)
			}
		}
	}
}

// TestFaultsReceiverResetsConnection: a receiver that resets the TCP
// connection after reading the request, or after writing half a status
// line, on fresh connections. Neither is a success; each is one recorded
// attempt without a status, and a delivery that keeps being reset fails
// at max_attempts.
func TestFaultsReceiverResetsConnection(t *testing.T) { checkResets(t, false) }

// TestFaultsResetOnReusedConnectionIsOneRequest: the same with kept-alive
// connections, so that resets hit connections that an earlier 200 left in
// the pool. One attempt is still one attempt on record; the transport may
// have sent it twice (see withoutTransportResends).
func TestFaultsResetOnReusedConnectionIsOneRequest(t *testing.T) {
	checkResets(t, true)
}

// TestFaultsTooManyRequestsWithRetryAfter: a receiver throttling with 429
// and Retry-After. The next attempt never comes before the Retry-After; a
// Retry-After that would end past max_elapsed fails the delivery at once
// instead of sleeping through it; garbage Retry-After values fall back to
// the backoff (and never make the dispatcher spin).
func TestFaultsTooManyRequestsWithRetryAfter(t *testing.T) {
	db, _ := openDB(t)
	l := newLedger()
	var mu sync.Mutex
	last429 := map[string]time.Time{} // per key: when the last 429 was sent
	early := make(chan string, 100)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		key := r.Header.Get(HeaderIdempotencyKey)
		attempt, _ := strconv.Atoi(r.Header.Get(HeaderAttempt))
		mu.Lock()
		if at, ok := last429[key]; ok && r.URL.Path == "/throttle" && time.Since(at) < time.Second {
			early <- fmt.Sprintf("%s attempt %d came %s after a Retry-After: 1", key, attempt, time.Since(at))
		}
		mu.Unlock()
		retryAfter := map[string]string{"/throttle": "1", "/longer": "1", "/garbage": "soon", "/huge": "99999999999999999999999"}[r.URL.Path]
		if attempt > 1 && r.URL.Path != "/longer" {
			l.note(r, http.StatusOK)
			return
		}
		l.note(r, http.StatusTooManyRequests)
		mu.Lock()
		last429[key] = time.Now()
		mu.Unlock()
		w.Header().Set("Retry-After", retryAfter)
		w.WriteHeader(http.StatusTooManyRequests)
	})
	mk := func(id string, mod func(*storage.Endpoint)) storage.Endpoint {
		return testEndpoint(t, db, id, rc.URL+"/"+id, func(ep *storage.Endpoint) {
			ep.Retry.MaxInterval = 5 * time.Second
			if mod != nil {
				mod(ep)
			}
		})
	}
	throttle := mk("throttle", nil)
	longer := mk("longer", func(ep *storage.Endpoint) { ep.Retry.MaxElapsed = 500 * time.Millisecond })
	garbage := mk("garbage", nil)
	huge := mk("huge", func(ep *storage.Endpoint) { ep.Retry.MaxInterval = time.Second })
	eps := []storage.Endpoint{throttle, longer, garbage, huge}
	var ds []storage.Delivery
	for _, ep := range eps {
		ds = append(ds, acceptN(t, db, 3, ep)...)
	}
	start := time.Now()
	startDispatcher(t, db, faultsConfig, eps...).Notify()
	testsupport.WaitFor(t, wait, "every delivery to settle", settled(t, db, ds))
	close(early)
	for msg := range early {
		t.Error("retried before Retry-After allowed: " + msg)
	}

	for _, d := range ds {
		p := map[string]storage.RetryPolicy{"throttle": throttle.Retry, "longer": longer.Retry, "garbage": garbage.Retry, "huge": huge.Retry}[d.Endpoint]
		checkAgainstLedger(t, db, l, p, d)
		as := attempts(t, db, d.ID)
		switch d.Endpoint {
		case "longer":
			if len(as) != 1 || !strings.Contains(as[0].Error, "max_elapsed") {
				t.Fatalf("attempts %+v: a Retry-After past max_elapsed must fail the delivery after one attempt", as)
			}
		default:
			if len(as) != 2 || delivery(t, db, d.ID).State != storage.StateSucceeded {
				t.Fatalf("delivery to %s: attempts %+v, want a 429 then a 200", d.Endpoint, as)
			}
			gap := as[1].At.Sub(as[0].At)
			if d.Endpoint == "throttle" && gap < 900*time.Millisecond {
				t.Fatalf("second attempt %s after the 429 with Retry-After: 1", gap)
			}
			if d.Endpoint == "huge" && gap < 900*time.Millisecond {
				t.Fatalf("second attempt %s after the 429 with a Retry-After past uint64; want max_interval (1s)", gap)
			}
			if d.Endpoint == "garbage" && gap > 900*time.Millisecond {
				t.Fatalf("second attempt %s after a 429 with an unusable Retry-After; want the millisecond backoff", gap)
			}
		}
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("took %s: the max_elapsed check must not wait out a long Retry-After", elapsed)
	}
}

// downReceiver is a receiver whose server can be stopped, and started
// again on the same address.
type downReceiver struct {
	t    *testing.T
	addr string
	l    *ledger
	mu   sync.Mutex
	srv  *http.Server
	done chan struct{}
}

func newDownReceiver(t *testing.T, l *ledger) *downReceiver {
	r := &downReceiver{t: t, addr: "127.0.0.1:0", l: l}
	r.up()
	t.Cleanup(r.down)
	return r
}

// up starts the server on the receiver's address (a fresh port the first
// time, then the same one).
func (r *downReceiver) up() {
	r.t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		r.t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.l.note(req, http.StatusOK)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	r.mu.Lock()
	r.srv, r.done = srv, done
	r.mu.Unlock()
}

// down closes the listener and every connection; connecting is refused.
func (r *downReceiver) down() {
	r.mu.Lock()
	srv, done := r.srv, r.done
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-done
	}
}

// TestFaultsReceiverDownForAWhile: the receiver's listener is closed (the
// host is up, the service is not: connection refused), then a server comes
// back on the same address. Deliveries retry through the outage and
// succeed when it ends, with every refused attempt recorded; a delivery
// whose budget runs out during the outage fails and stays failed.
func TestFaultsReceiverDownForAWhile(t *testing.T) {
	db, _ := openDB(t)
	l := newLedger()
	rc := newDownReceiver(t, l)
	url := "http://" + rc.addr
	patient := testEndpoint(t, db, "patient", url+"/patient")
	impatient := testEndpoint(t, db, "impatient", url+"/impatient", func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = 2 })
	d := startDispatcher(t, db, faultsConfig, patient, impatient)
	before := accept(t, db, event{}, patient)[0]
	d.Notify()
	testsupport.WaitFor(t, wait, "the delivery before the outage", inState(t, db, before.ID, storage.StateSucceeded))

	rc.down()
	during := accept(t, db, event{}, patient)[0]
	gaveUp := accept(t, db, event{}, impatient)[0]
	d.Notify()
	testsupport.WaitFor(t, wait, "attempts against the closed port", func() bool {
		return delivery(t, db, during.ID).AttemptCount >= 3 && delivery(t, db, gaveUp.ID).State.Terminal()
	})
	rc.up()
	testsupport.WaitFor(t, wait, "the delivery after the outage", inState(t, db, during.ID, storage.StateSucceeded))

	checkAgainstLedger(t, db, l, patient.Retry, before)
	// Refused attempts never reach a receiver: each is recorded without a
	// status; the receiver saw only the last one, which succeeded. The
	// first ones may instead find a kept-alive connection closed by the
	// outage (EOF or reset): net/http may not resend a delivery by itself.
	as := attempts(t, db, during.ID)
	for i, a := range as[:len(as)-1] {
		refused := strings.Contains(a.Error, "connection refused")
		stale := strings.Contains(a.Error, "EOF") || strings.Contains(a.Error, "reset")
		if a.N != i+1 || a.StatusCode != 0 || !(refused || stale) {
			t.Fatalf("attempt during the outage %+v: want connection refused", a)
		}
	}
	if last := as[len(as)-1]; last.StatusCode != 200 || delivery(t, db, during.ID).AttemptCount != len(as) {
		t.Fatalf("attempts %+v: want refused ones, then a 200", as)
	}
	if saw := l.of(during.IdempotencyKey); len(saw) != 1 || saw[0].attempt != len(as) || saw[0].answer != 200 {
		t.Fatalf("the receiver saw %+v, want only attempt %d", saw, len(as))
	}
	gone := attempts(t, db, gaveUp.ID)
	if got := delivery(t, db, gaveUp.ID); got.State != storage.StateFailed || got.AttemptCount != 2 || len(gone) != 2 ||
		!strings.Contains(gone[1].Error, "max_attempts") || len(l.of(gaveUp.IdempotencyKey)) != 0 {
		t.Fatalf("impatient delivery %+v, attempts %+v: want failed after 2 refused attempts, never received", got, gone)
	}
}

// faultyQueue is the real store with Claim and Complete failing on command.
type faultyQueue struct {
	*badger.DB
	failClaim, failComplete atomic.Bool
	claims, completes       atomic.Int64 // failed calls
}

var errInjected = errors.New("injected store fault")

func (q *faultyQueue) Claim(ctx context.Context, endpoint string, now time.Time, limit int, lease time.Duration) ([]storage.Job, error) {
	if q.failClaim.Load() {
		q.claims.Add(1)
		return nil, errInjected
	}
	return q.DB.Claim(ctx, endpoint, now, limit, lease)
}

func (q *faultyQueue) Complete(ctx context.Context, out *storage.Outcome) error {
	if q.failComplete.Load() {
		q.completes.Add(1)
		return errInjected
	}
	return q.DB.Complete(ctx, out)
}

// TestFaultsStoreClaimAndComplete: while Claim fails nothing is sent and no
// attempt is spent; when it recovers the delivery goes out. When Complete
// fails after the receiver answered, the delivery is not marked delivered
// and no attempt is recorded; once its lease expires (a fake clock moves
// past it) it is sent again with the same Idempotency-Key and recorded.
func TestFaultsStoreClaimAndComplete(t *testing.T) {
	db, _ := openDB(t)
	q := &faultyQueue{DB: db}
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	l := newLedger()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) { l.note(r, http.StatusOK) })
	ep := testEndpoint(t, db, "ep", rc.URL)
	cfg := faultsConfig
	cfg.Now = clock
	q.failClaim.Store(true)
	d := startDispatcher(t, q, cfg, ep)
	first := accept(t, db, event{}, ep)[0]
	d.Notify()
	testsupport.WaitFor(t, wait, "failed claims", func() bool { return q.claims.Load() >= 3 })
	if got := delivery(t, db, first.ID); got.State != storage.StatePending || got.AttemptCount != 0 || rc.count() != 0 {
		t.Fatalf("while Claim fails: %+v after %d requests; want pending, untouched", got, rc.count())
	}
	q.failClaim.Store(false)
	d.Notify()
	testsupport.WaitFor(t, wait, "delivery after Claim recovers", inState(t, db, first.ID, storage.StateSucceeded))

	q.failComplete.Store(true)
	second := accept(t, db, event{}, ep)[0]
	d.Notify()
	testsupport.WaitFor(t, wait, "a failed Complete", func() bool { return q.completes.Load() >= 1 })
	got := delivery(t, db, second.ID)
	if got.State != storage.StateDelivering || got.AttemptCount != 0 || len(attempts(t, db, second.ID)) != 0 {
		t.Fatalf("after a failed Complete: %+v; want still claimed, no attempt recorded", got)
	}
	q.failComplete.Store(false)
	skew.Store(int64(got.LeaseUntil.Sub(time.Now()) + time.Second)) // the lease has expired
	d.Notify()
	testsupport.WaitFor(t, wait, "delivery after the lease", inState(t, db, second.ID, storage.StateSucceeded))

	saw := l.of(second.IdempotencyKey)
	as := attempts(t, db, second.ID)
	if len(saw) != 2 || saw[0].attempt != 1 || saw[1].attempt != 1 || len(as) != 1 || as[0].StatusCode != 200 {
		t.Fatalf("receiver saw %+v, store recorded %+v; want the unrecorded attempt sent again as attempt 1, recorded once", saw, as)
	}
}

// A receiver's answer with headers over maxResponseHeader is a failed
// attempt, not a success read at the cost of its size in memory.
func TestFaultsHugeResponseHeaders(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("X-Padding", strings.Repeat("x", 2*maxResponseHeader))
	})
	ep := testEndpoint(t, db, "huge", rc.URL, func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = 1 })
	ds := acceptN(t, db, 1, ep)
	startDispatcher(t, db, faultsConfig, ep).Notify()
	testsupport.WaitFor(t, wait, "the delivery to settle", settled(t, db, ds))
	if d := delivery(t, db, ds[0].ID); d.State != storage.StateFailed || !strings.Contains(d.LastError, "header") {
		t.Fatalf("delivery answered with %d MiB of headers: %s (%q); want failed", 2*maxResponseHeader>>20, d.State, d.LastError)
	}
}
