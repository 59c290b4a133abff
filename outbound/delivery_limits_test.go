package outbound

// Black-box tests of outbound delivery (SPEC section 4): signatures across
// a secret rotation, pacing of retries, huge answers, SSRF at dial time.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"
)

// verifySW checks a delivery's Standard Webhooks signature with secret,
// independently of hookgate's signing code: HMAC-SHA256 over
// "{webhook-id}.{webhook-timestamp}.{body}" with the base64-decoded key
// after "whsec_", one of the space-separated "v1,<base64>" values.
func verifySW(secret string, h http.Header, body []byte) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(h.Get("webhook-id") + "." + h.Get("webhook-timestamp") + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(h.Get("webhook-signature")) {
		if hmac.Equal([]byte(sig), []byte(want)) {
			return true
		}
	}
	return false
}

// gatedReceiver is a receiver whose every request waits for the test to let it
// answer, with the status answer(n) gives.
type gatedReceiver struct {
	*receiver
	release chan struct{}
}

func newGatedReceiver(t *testing.T, answer func(n int) int) *gatedReceiver {
	g := &gatedReceiver{release: make(chan struct{}, 100)}
	g.receiver = newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		case <-time.After(wait):
		}
		w.WriteHeader(answer(n))
	})
	return g
}

// updateEndpoint stores a change of ep and tells the dispatcher, as the admin
// API does (store write, then the registry reload).
func updateEndpoint(t *testing.T, db *badger.DB, d *Dispatcher, id string, fn func(*storage.Endpoint)) storage.Endpoint {
	t.Helper()
	ep, err := db.UpdateEndpoint(context.Background(), id, func(ep *storage.Endpoint) error {
		fn(ep)
		ep.UpdatedAt = time.Now().UTC()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d.UpsertEndpoint(ep)
	return ep
}

// A rotation while a delivery is retrying: the next attempt is signed with
// the new secret and, during the grace, with the old one too; once the
// grace is over, only with the new one.
func TestRotationDuringRetriesSignsWithBothSecretsThenOnlyTheNew(t *testing.T) {
	db, _ := openDB(t)
	rc := newGatedReceiver(t, func(n int) int {
		if n < 3 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	oldSecret, newSecret := NewSecret(), NewSecret()
	ep := testEndpoint(t, db, "rot", rc.URL, func(ep *storage.Endpoint) {
		ep.Secrets = []storage.Secret{{Value: oldSecret}}
	})
	ds := accept(t, db, event{body: []byte(`{"id":"evt_rot","amount":42}`)}, ep)
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify(ep.ID)

	testsupport.WaitFor(t, wait, "attempt 1", func() bool { return rc.count() >= 1 })
	// Rotate while attempt 1 is in flight: grace of an hour.
	updateEndpoint(t, db, d, ep.ID, func(ep *storage.Endpoint) {
		ep.Secrets = []storage.Secret{{Value: newSecret}, {Value: oldSecret, ExpiresAt: time.Now().Add(time.Hour)}}
	})
	rc.release <- struct{}{}
	testsupport.WaitFor(t, wait, "attempt 2", func() bool { return rc.count() >= 2 })
	// The grace ends while attempt 2 is in flight.
	updateEndpoint(t, db, d, ep.ID, func(ep *storage.Endpoint) {
		ep.Secrets = []storage.Secret{{Value: newSecret}, {Value: oldSecret, ExpiresAt: time.Now().Add(-time.Second)}}
	})
	rc.release <- struct{}{}
	testsupport.WaitFor(t, wait, "attempt 3", func() bool { return rc.count() >= 3 })
	rc.release <- struct{}{}
	testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

	r1, r2, r3 := rc.request(0), rc.request(1), rc.request(2)
	if !verifySW(oldSecret, r1.header, r1.body) || verifySW(newSecret, r1.header, r1.body) {
		t.Errorf("attempt 1 (before the rotation): signature %q; want the old secret's only", r1.header.Get("webhook-signature"))
	}
	if !verifySW(newSecret, r2.header, r2.body) || !verifySW(oldSecret, r2.header, r2.body) {
		t.Errorf("attempt 2 (in the grace): a subscriber verifying with the new or the old secret rejects it: %q", r2.header.Get("webhook-signature"))
	}
	if !verifySW(newSecret, r3.header, r3.body) || verifySW(oldSecret, r3.header, r3.body) {
		t.Errorf("attempt 3 (grace over): signature %q; want the new secret's only", r3.header.Get("webhook-signature"))
	}
	for i, r := range []received{r1, r2, r3} {
		if got := r.header.Get(HeaderAttempt); got != strconv.Itoa(i+1) {
			t.Errorf("request %d carries hookgate-attempt %q", i+1, got)
		}
		if r.header.Get(HeaderIdempotencyKey) != ds[0].IdempotencyKey || r.header.Get(HeaderWebhookID) != ds[0].IdempotencyKey {
			t.Errorf("request %d: Idempotency-Key %q, webhook-id %q; want %q on every attempt", i+1,
				r.header.Get(HeaderIdempotencyKey), r.header.Get(HeaderWebhookID), ds[0].IdempotencyKey)
		}
	}
}

// rate_limit counts retries as attempts: a receiver failing every request
// is not hammered faster than the endpoint's rate.
func TestRateLimitPacesRetries(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusInternalServerError) })
	ep := testEndpoint(t, db, "paced", rc.URL, func(ep *storage.Endpoint) { ep.RateLimit, ep.MaxInFlight = 10, 10 })
	for range 3 {
		accept(t, db, event{}, ep)
	}
	startDispatcher(t, db, Config{CircuitFailures: 1 << 20}, ep).Notify()
	testsupport.WaitFor(t, wait, "16 attempts", func() bool { return rc.count() >= 16 })
	reqs := rc.all()
	// 10/s with a burst of 1: 16 attempts span at least 1.5 s.
	if spread := reqs[15].at.Sub(reqs[0].at); spread < 1300*time.Millisecond {
		t.Fatalf("16 attempts (first tries and retries) in %s with rate_limit 10/s: the receiver is hit faster than its rate", spread)
	}
}

// max_in_flight bounds retries too, and with slow answers.
func TestMaxInFlightHoldsAcrossRetries(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-time.After(20 * time.Millisecond): // a slow receiver
		case <-r.Context().Done():
		}
		if n%2 == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	ep := testEndpoint(t, db, "bounded", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 2 })
	var ds []storage.Delivery
	for range 8 {
		ds = append(ds, accept(t, db, event{}, ep)...)
	}
	startDispatcher(t, db, Config{CircuitFailures: 1 << 20}, ep).Notify()
	for _, d := range ds {
		testsupport.WaitFor(t, wait, "delivery", inState(t, db, d.ID, storage.StateSucceeded))
	}
	if p := rc.maxInFlight(); p > 2 {
		t.Fatalf("the receiver had %d requests at once with max_in_flight 2", p)
	}
}

// A huge answer, 2xx or not, ends the attempt quickly: the excerpt is at
// most 1 KiB and the rest is not read to its end.
func TestHugeAnswersAreCutShort(t *testing.T) {
	db, _ := openDB(t)
	var mu sync.Mutex
	sent := map[string]int{}
	chunk := []byte(strings.Repeat("x", 32<<10))
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/err" {
			w.WriteHeader(http.StatusInternalServerError)
		}
		for i := 0; i < 64<<20/len(chunk); i++ { // 64 MiB, fast
			if _, err := w.Write(chunk); err != nil {
				break
			}
			mu.Lock()
			sent[r.URL.Path] += len(chunk)
			mu.Unlock()
		}
	})
	ok := testEndpoint(t, db, "ok", rc.URL+"/ok", func(ep *storage.Endpoint) { ep.Timeout = 5 * time.Second })
	bad := testEndpoint(t, db, "bad", rc.URL+"/err", func(ep *storage.Endpoint) {
		ep.Timeout = 5 * time.Second
		ep.Retry.MaxAttempts = 1
	})
	d1 := accept(t, db, event{}, ok)[0]
	d2 := accept(t, db, event{}, bad)[0]
	startDispatcher(t, db, Config{}, ok, bad).Notify()
	testsupport.WaitFor(t, wait, "the 2xx", inState(t, db, d1.ID, storage.StateSucceeded))
	testsupport.WaitFor(t, wait, "the 5xx to fail", inState(t, db, d2.ID, storage.StateFailed))
	for _, id := range []string{d1.ID, d2.ID} {
		as := attempts(t, db, id)
		if len(as) != 1 || len(as[0].Response) > 1024 || as[0].Latency > 2*time.Second {
			t.Errorf("attempts of %s: n=%d, excerpt %d bytes, latency %v; want one attempt, ≤1 KiB, well under its 5s timeout",
				id, len(as), len(as[0].Response), as[0].Latency)
		}
	}
}

// Loopback spelled every way an endpoint URL can spell it is refused when
// dialled, before a byte reaches the receiver.
func TestLoopbackSpellingsAreRefusedAtDial(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	_, port, _ := net.SplitHostPort(rc.Listener.Addr().String())
	urls := map[string]string{
		"v4":         "http://127.0.0.1:" + port + "/",
		"v4-other":   "http://127.0.0.2:" + port + "/",
		"mapped":     "http://[::ffff:127.0.0.1]:" + port + "/",
		"mapped-hex": "http://[::ffff:7f00:1]:" + port + "/",
		"v6":         "http://[::1]:" + port + "/",
		"unspec4":    "http://0.0.0.0:" + port + "/",
		"unspec6":    "http://[::]:" + port + "/",
		"name":       "http://localhost:" + port + "/",
		"name-dot":   "http://localhost.:" + port + "/",
		"upper":      "http://LOCALHOST:" + port + "/",
		"idna":       "http://ⓛocalhost:" + port + "/",
		"fullwidth":  "http://１２７.０.０.１:" + port + "/",
	}
	var eps []storage.Endpoint
	dls := map[string]string{}
	for name, u := range urls {
		ep := testEndpoint(t, db, "ep-"+name, u)
		eps = append(eps, ep)
		dls[name] = accept(t, db, event{}, ep)[0].ID
	}
	startDispatcher(t, db, Config{Client: NewClient(false)}, eps...).Notify()
	for name, id := range dls {
		testsupport.WaitFor(t, wait, "an attempt of "+name, func() bool { return delivery(t, db, id).AttemptCount >= 1 })
		as := attempts(t, db, id)
		if as[0].StatusCode != 0 || as[0].Error == "" {
			t.Errorf("%s (%s): attempt %+v; want a refused connection", name, urls[name], as[0])
		}
	}
	if n := rc.count(); n != 0 {
		t.Fatalf("a loopback receiver got %d deliveries with allow_private_targets false", n)
	}
}

// holdingReceiver answers the first request 503 with Retry-After: secs and
// every later one 200, and remembers when it sent the 503.
func holdingReceiver(t *testing.T, secs int) (*receiver, func() time.Time) {
	var mu sync.Mutex
	var at time.Time
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			w.WriteHeader(http.StatusServiceUnavailable)
			mu.Lock()
			at = time.Now()
			mu.Unlock()
		}
	})
	return rc, func() time.Time { mu.Lock(); defer mu.Unlock(); return at }
}

// A 503 with Retry-After holds the whole endpoint: the other deliveries
// waiting for it, and new ones, are not sent before then either.
func TestRetryAfterHoldsTheWholeEndpoint(t *testing.T) {
	db, _ := openDB(t)
	rc, first503 := holdingReceiver(t, 1)
	ep := testEndpoint(t, db, "held", rc.URL, func(ep *storage.Endpoint) {
		ep.MaxInFlight = 1
		ep.Retry.MaxInterval = 10 * time.Second
	})
	ds := accept(t, db, event{}, ep)
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify(ep.ID)
	testsupport.WaitFor(t, wait, "the 503", func() bool { return !first503().IsZero() })
	ds = append(ds, accept(t, db, event{}, ep)...)
	ds = append(ds, accept(t, db, event{}, ep)...)
	d.Notify(ep.ID)
	for _, dl := range ds {
		testsupport.WaitFor(t, wait, "delivery", inState(t, db, dl.ID, storage.StateSucceeded))
	}
	for i, r := range rc.all()[1:] {
		if r.at.Sub(first503()) < 900*time.Millisecond {
			t.Errorf("request %d came %s after a 503 with Retry-After: 1", i+2, r.at.Sub(first503()))
		}
	}
}

// The same hold across a restart: SPEC section 4 says backoff state and due
// times are persistent, and README says a Retry-After pauses every delivery
// to the endpoint until then, new events' included. After a restart (a
// deploy) within the receiver's Retry-After, the receiver that asked for
// quiet must not get the endpoint's other deliveries at once.
func TestRetryAfterHoldSurvivesARestart(t *testing.T) {
	db, _ := openDB(t)
	rc, first503 := holdingReceiver(t, 3)
	ep := testEndpoint(t, db, "held", rc.URL, func(ep *storage.Endpoint) {
		ep.MaxInFlight = 1
		ep.Retry.MaxInterval = 10 * time.Second
	})
	held := accept(t, db, event{}, ep)[0]
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify(ep.ID)
	testsupport.WaitFor(t, wait, "the 503's outcome", func() bool { return delivery(t, db, held.ID).AttemptCount == 1 })
	d.Stop(time.Second)

	other := accept(t, db, event{}, ep)[0] // a new event, due now
	startDispatcher(t, db, Config{}, ep).Notify(ep.ID)
	testsupport.WaitFor(t, wait, "the other delivery", inState(t, db, other.ID, storage.StateSucceeded))
	testsupport.WaitFor(t, wait, "the held delivery", inState(t, db, held.ID, storage.StateSucceeded))
	for i, r := range rc.all()[1:] {
		if gap := r.at.Sub(first503()); gap < 2900*time.Millisecond {
			t.Errorf("after a restart, request %d (key %s) reached the receiver %s after it answered 503 with Retry-After: 3: the endpoint's hold is forgotten on restart",
				i+2, r.header.Get(HeaderIdempotencyKey), gap.Round(time.Millisecond))
		}
	}
}

// An operator's retry that goes through ends the receiver's pause in the
// store too: the next start holds nothing back (Outcome.EndHold, set only
// when the loop knows a hold may be stored).
func TestRetryNowSuccessEndsTheStoredHold(t *testing.T) {
	db, _ := openDB(t)
	rc, first503 := holdingReceiver(t, 600)
	ep := testEndpoint(t, db, "held", rc.URL, func(ep *storage.Endpoint) {
		ep.MaxInFlight = 1
		ep.Retry.MaxInterval = time.Hour
	})
	held := accept(t, db, event{}, ep)[0]
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify(ep.ID)
	testsupport.WaitFor(t, wait, "the 503's outcome", func() bool { return delivery(t, db, held.ID).AttemptCount == 1 })
	if until, _, err := db.EndpointHold(context.Background(), ep.ID, time.Now()); err != nil || until.Before(first503().Add(9*time.Minute)) {
		t.Fatalf("stored hold after a 503 with Retry-After: 600: %v %v", until, err)
	}
	if _, err := db.Retry(context.Background(), held.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	d.RetryNow(ep.ID)
	testsupport.WaitFor(t, wait, "the retried delivery", inState(t, db, held.ID, storage.StateSucceeded))
	if until, _, err := db.EndpointHold(context.Background(), ep.ID, time.Now()); err != nil || !until.IsZero() {
		t.Fatalf("stored hold after the operator's retry went through: %v %v, want none", until, err)
	}
}
