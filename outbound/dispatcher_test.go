package outbound

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

const wait = 10 * time.Second // deadline of every waitFor: generous, it only bounds failures

func TestDeliveryCarriesTheHeaderContract(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	now := time.Now()
	oldSecret, newSecret := NewSecret(), NewSecret()
	ep := testEndpoint(t, db, "billing", rc.URL+"/hooks?team=billing", func(ep *storage.Endpoint) {
		ep.Secrets = []storage.Secret{{Value: newSecret}, {Value: oldSecret, ExpiresAt: now.Add(time.Hour)}}
		ep.Headers = map[string]string{"X-Team": "billing", "Idempotency-Key": "spoofed", "Webhook-Id": "spoofed"}
	})
	body := []byte("\x00\xff\xfe binary \r\n{\"x\":1}\xc3\x28")
	ds := accept(t, db, event{source: "stripe", typ: "invoice.paid", contentType: "text/plain; charset=latin1", body: body}, ep)
	startDispatcher(t, db, Config{}, ep).Notify(ep.ID)
	testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

	req := rc.request(0)
	h := req.header
	if string(req.body) != string(body) || req.path != "/hooks" {
		t.Fatalf("got %q at %s, want the original body byte for byte at /hooks", req.body, req.path)
	}
	key := ds[0].IdempotencyKey
	for name, want := range map[string]string{
		"Content-Type":       "text/plain; charset=latin1",
		HeaderIdempotencyKey: key,
		HeaderWebhookID:      key,
		HeaderEventType:      "invoice.paid",
		HeaderSource:         "stripe",
		HeaderAttempt:        "1",
		"User-Agent":         "hookgate/test",
		"X-Team":             "billing",
	} {
		if got := h.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want [%q]", name, got, want)
		}
	}
	ts, err := strconv.ParseInt(h.Get(HeaderWebhookTimestamp), 10, 64)
	if err != nil || ts < now.Unix()-1 || ts > time.Now().Unix()+1 {
		t.Errorf("webhook-timestamp %q is not the unix time of the attempt", h.Get(HeaderWebhookTimestamp))
	}
	if n := len(strings.Fields(h.Get(HeaderWebhookSignature))); n != 2 {
		t.Errorf("%d signatures, want one per live secret (2)", n)
	}
	for _, s := range []string{newSecret, oldSecret} {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(req.body, h); err != nil {
			t.Errorf("the official library rejects the delivery: %v", err)
		}
	}

	d := delivery(t, db, ds[0].ID)
	as := attempts(t, db, ds[0].ID)
	if d.AttemptCount != 1 || len(as) != 1 || as[0].StatusCode != 200 || as[0].N != 1 || as[0].Latency <= 0 || as[0].At.IsZero() || as[0].Error != "" {
		t.Fatalf("delivery %+v, attempts %+v", d, as)
	}
}

func TestRedirectIsAFailedAttemptAndNotFollowed(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	})
	ep := testEndpoint(t, db, "ep", rc.URL+"/hook")
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{}, ep).Notify()
	testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

	as := attempts(t, db, ds[0].ID)
	if len(as) != 2 || as[0].StatusCode != http.StatusFound || !strings.Contains(as[0].Error, "HTTP 302") || as[1].StatusCode != 200 {
		t.Fatalf("attempts %+v; want a failed 302 then a 200", as)
	}
	for _, r := range rc.all() {
		if r.path != "/hook" {
			t.Fatalf("the redirect was followed to %s", r.path)
		}
	}
	assertSameKeyAndAttemptNumbers(t, rc, ds[0].IdempotencyKey)
}

func TestGoneFailsTheDeliveryAndDisablesTheEndpoint(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusGone) })
	ep := testEndpoint(t, db, "gone", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	first := accept(t, db, event{}, ep)[0]
	second := accept(t, db, event{}, ep)[0]
	disabled := make(chan storage.Endpoint, 1)
	d := startDispatcher(t, db, Config{OnDisable: func(ep storage.Endpoint) { disabled <- ep }}, ep)
	d.Notify(ep.ID)

	testsupport.WaitFor(t, wait, "the first delivery to fail", inState(t, db, first.ID, storage.StateFailed))
	got := waitDisabled(t, disabled)
	stored, err := db.GetEndpoint(context.Background(), ep.ID)
	if err != nil || !stored.Disabled || stored.DisabledReason == "" || !got.Disabled {
		t.Fatalf("stored endpoint %+v (%v); want disabled with a reason", stored, err)
	}
	// A disabled endpoint claims nothing, however often it is woken.
	waitForPasses(t, d, ep.ID, 5)
	if s := delivery(t, db, second.ID); s.State != storage.StatePending || s.AttemptCount != 0 || rc.count() != 1 {
		t.Fatalf("second delivery %s with %d attempts after %d requests; want it untouched", s.State, s.AttemptCount, rc.count())
	}
	if as := attempts(t, db, first.ID); len(as) != 1 || as[0].StatusCode != http.StatusGone || !strings.Contains(as[0].Error, "410") {
		t.Fatalf("attempts %+v", as)
	}
}

// waitDisabled returns the endpoint OnDisable reported on ch.
func waitDisabled(t *testing.T, ch <-chan storage.Endpoint) storage.Endpoint {
	t.Helper()
	select {
	case ep := <-ch:
		return ep
	case <-time.After(wait):
		t.Fatal("OnDisable was not called")
		return storage.Endpoint{}
	}
}

// A 410 disables the endpoint as it is stored, not as the dispatcher last
// saw it: a change an operator made in the meantime (a rotated secret, a
// new timeout) survives the disable.
func TestGoneKeepsChangesMadeMeanwhile(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(http.StatusGone) })
	ep := testEndpoint(t, db, "gone", rc.URL)
	disabled := make(chan storage.Endpoint, 1)
	d := startDispatcher(t, db, Config{OnDisable: func(ep storage.Endpoint) { disabled <- ep }}, ep)
	// The operator's change reaches the store before the dispatcher hears
	// of it (the gateway tells it right after its write).
	changed := ep
	changed.Secrets = []storage.Secret{{Value: NewSecret()}}
	changed.Timeout = 7 * time.Second
	if err := db.PutEndpoint(context.Background(), &changed); err != nil {
		t.Fatal(err)
	}
	accept(t, db, event{}, ep)
	d.Notify(ep.ID)
	got := waitDisabled(t, disabled)
	stored, err := db.GetEndpoint(context.Background(), ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !stored.Disabled || stored.DisabledReason == "" {
		t.Fatalf("stored endpoint %+v: want disabled with a reason", stored)
	}
	if stored.Secrets[0].Value != changed.Secrets[0].Value || stored.Timeout != changed.Timeout {
		t.Fatalf("the disable wrote back the endpoint as the dispatcher saw it (timeout %v, secret changed: %v), want the operator's", stored.Timeout, stored.Secrets[0].Value == changed.Secrets[0].Value)
	}
	if got.Secrets[0].Value != changed.Secrets[0].Value || !got.Disabled {
		t.Fatalf("OnDisable got an endpoint (disabled %v) other than the stored one", got.Disabled)
	}
}

func TestServerErrorIsRetriedWithBackoffThenSucceeds(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, status(http.StatusInternalServerError, 2))
	ep := testEndpoint(t, db, "ep", rc.URL)
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{}, ep).Notify()
	testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

	as := attempts(t, db, ds[0].ID)
	if len(as) != 3 || as[0].StatusCode != 500 || as[1].StatusCode != 500 || as[2].StatusCode != 200 {
		t.Fatalf("attempts %+v", as)
	}
	if d := delivery(t, db, ds[0].ID); d.AttemptCount != 3 {
		t.Fatalf("attempt_count %d", d.AttemptCount)
	}
	reqs := rc.all()
	for i, want := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond} {
		if gap := reqs[i+1].at.Sub(reqs[i].at); gap < want {
			t.Errorf("retry %d came %s after the attempt before it, want at least the backoff %s", i+1, gap, want)
		}
	}
	assertSameKeyAndAttemptNumbers(t, rc, ds[0].IdempotencyKey)
}

func TestTimeoutIsRetried(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			<-r.Context().Done() // hang until the gateway gives up
		}
	})
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Timeout = 100 * time.Millisecond })
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{}, ep).Notify()
	testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

	as := attempts(t, db, ds[0].ID)
	if len(as) != 2 || as[0].StatusCode != 0 || !strings.Contains(as[0].Error, "timeout after 100ms") || as[0].Latency < 100*time.Millisecond {
		t.Fatalf("attempts %+v; want a timed out attempt, then a success", as)
	}
}

func TestConnectionResetIsRetried(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(err)
			}
			_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
			_ = conn.Close()
		}
	})
	ep := testEndpoint(t, db, "ep", rc.URL)
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{}, ep).Notify()
	testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))

	as := attempts(t, db, ds[0].ID)
	if len(as) != 2 || as[0].StatusCode != 0 || as[0].Error == "" || strings.Contains(as[0].Error, rc.URL) {
		t.Fatalf("attempts %+v; want a reset attempt (error without the URL), then a success", as)
	}
}

func TestRetryAfterIsHonouredUpToMaxInterval(t *testing.T) {
	for _, tc := range []struct {
		name        string
		code        int
		retryAfter  func() (header string, notBefore time.Time)
		maxInterval time.Duration
	}{
		{"seconds", http.StatusTooManyRequests, func() (string, time.Time) {
			return "1", time.Now().Add(time.Second)
		}, 10 * time.Second},
		{"http date", http.StatusServiceUnavailable, func() (string, time.Time) {
			at := time.Now().Add(2 * time.Second).UTC().Truncate(time.Second)
			return at.Format(http.TimeFormat), at
		}, 10 * time.Second},
		{"capped", http.StatusTooManyRequests, func() (string, time.Time) {
			return "3600", time.Now().Add(50 * time.Millisecond)
		}, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, _ := openDB(t)
			var notBefore time.Time
			rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, n int) {
				if n == 1 {
					var v string
					v, notBefore = tc.retryAfter()
					w.Header().Set("Retry-After", v)
					w.WriteHeader(tc.code)
				}
			})
			ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Retry.MaxInterval = tc.maxInterval })
			ds := accept(t, db, event{}, ep)
			startDispatcher(t, db, Config{}, ep).Notify()
			testsupport.WaitFor(t, wait, "delivery", inState(t, db, ds[0].ID, storage.StateSucceeded))
			if second := rc.request(1).at; second.Before(notBefore) {
				t.Fatalf("retried %s before Retry-After allowed", notBefore.Sub(second))
			}
		})
	}
}

func TestMaxAttemptsFailsTheDelivery(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, status(http.StatusInternalServerError, 1<<30))
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Retry.MaxAttempts = 3 })
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{CircuitFailures: 100}, ep).Notify()
	testsupport.WaitFor(t, wait, "dead letter", inState(t, db, ds[0].ID, storage.StateFailed))

	as := attempts(t, db, ds[0].ID)
	if len(as) != 3 || !strings.Contains(as[2].Error, "max_attempts") || rc.count() != 3 {
		t.Fatalf("%d requests, attempts %+v; want 3, the last saying max_attempts", rc.count(), as)
	}
	assertSameKeyAndAttemptNumbers(t, rc, ds[0].IdempotencyKey)
}

func TestMaxElapsedFailsTheDelivery(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, status(http.StatusInternalServerError, 1<<30))
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) {
		ep.Retry = storage.RetryPolicy{InitialInterval: 200 * time.Millisecond, Multiplier: 2, MaxInterval: 10 * time.Second,
			MaxAttempts: 1000, MaxElapsed: 1500 * time.Millisecond}
	})
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{CircuitFailures: 100}, ep).Notify()
	testsupport.WaitFor(t, wait, "dead letter", inState(t, db, ds[0].ID, storage.StateFailed))

	as := attempts(t, db, ds[0].ID)
	// Waits of 200, 400 and 800ms fit in 1.5s; the next (1.6s) does not.
	// (With a tenth of these, a runner stalled 130 ms before the first
	// attempt ended would have seen a single attempt.)
	if len(as) < 2 || len(as) > 4 || !strings.Contains(as[len(as)-1].Error, "max_elapsed") {
		t.Fatalf("attempts %+v; want a few, the last saying max_elapsed", as)
	}
}

func TestRestartResumesPendingDeliveryOnItsPersistedSchedule(t *testing.T) {
	db, dir := openDB(t)
	rc := newReceiver(t, status(http.StatusInternalServerError, 1))
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) {
		ep.Retry.InitialInterval, ep.Retry.MaxInterval = 300*time.Millisecond, time.Second
	})
	ds := accept(t, db, event{}, ep)

	first := startDispatcher(t, db, Config{}, ep)
	first.Notify()
	testsupport.WaitFor(t, wait, "first attempt", func() bool { return delivery(t, db, ds[0].ID).AttemptCount == 1 })
	first.Stop(time.Second)
	pending := delivery(t, db, ds[0].ID)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if pending.State != storage.StatePending || pending.Interval != 300*time.Millisecond {
		t.Fatalf("after the first attempt: %+v", pending)
	}

	db, err := badger.Open(dir, badger.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	startDispatcher(t, db, Config{}, ep).Notify()
	testsupport.WaitFor(t, wait, "delivery after restart", inState(t, db, ds[0].ID, storage.StateSucceeded))

	if got := rc.request(1).at; got.Before(pending.NextAttemptAt) {
		t.Fatalf("retried %s before its persisted due time", pending.NextAttemptAt.Sub(got))
	}
	if d := delivery(t, db, ds[0].ID); d.AttemptCount != 2 {
		t.Fatalf("attempt_count %d after restart, want 2", d.AttemptCount)
	}
	assertSameKeyAndAttemptNumbers(t, rc, ds[0].IdempotencyKey)
}

func TestExpiredLeaseOfACrashedWorkerIsDelivered(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "ep", rc.URL)
	ds := accept(t, db, event{}, ep)
	// A worker claims the delivery and dies without completing it.
	jobs, err := db.Claim(context.Background(), ep.ID, time.Now(), 10, 300*time.Millisecond)
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %d jobs", err, len(jobs))
	}
	startDispatcher(t, db, Config{}, ep).Notify()
	testsupport.WaitFor(t, wait, "delivery after the lease", inState(t, db, ds[0].ID, storage.StateSucceeded))

	if got := rc.request(0).at; got.Before(jobs[0].Delivery.LeaseUntil) || rc.count() != 1 {
		t.Fatalf("delivered %s before the lease expired (%d requests)", jobs[0].Delivery.LeaseUntil.Sub(got), rc.count())
	}
	if a := rc.request(0).header.Get(HeaderAttempt); a != "1" {
		t.Fatalf("hookgate-attempt %s; the crashed attempt was never counted", a)
	}
}

func TestSlowEndpointDoesNotHoldBackOthers(t *testing.T) {
	db, _ := openDB(t)
	release := make(chan struct{})
	slow := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	fast := newReceiver(t, nil)
	slowEp := testEndpoint(t, db, "slow", slow.URL, func(ep *storage.Endpoint) {
		ep.MaxInFlight, ep.Timeout = 2, 10*time.Second
	})
	fastEp := testEndpoint(t, db, "fast", fast.URL)
	var slowDs, fastDs []storage.Delivery
	for range 6 {
		ds := accept(t, db, event{}, slowEp, fastEp)
		slowDs, fastDs = append(slowDs, ds[0]), append(fastDs, ds[1])
	}
	startDispatcher(t, db, Config{}, slowEp, fastEp).Notify()
	defer close(release)

	testsupport.WaitFor(t, wait, "the slow endpoint to fill its slots", func() bool { return slow.inFlight() == 2 })
	for _, d := range fastDs {
		testsupport.WaitFor(t, wait, "the fast endpoint's deliveries", inState(t, db, d.ID, storage.StateSucceeded))
	}
	if slow.inFlight() != 2 || slow.count() != 2 {
		t.Fatalf("slow endpoint: %d in flight, %d requests; want its 2 slots still hung and nothing more", slow.inFlight(), slow.count())
	}
	for _, d := range slowDs {
		if s := delivery(t, db, d.ID).State; s.Terminal() {
			t.Fatalf("a slow delivery is %s while its endpoint hangs", s)
		}
	}
	release <- struct{}{} // let one hung request finish; the rest follow once release is closed
	testsupport.WaitFor(t, wait, "a slow slot to free", func() bool { return slow.count() > 2 })
	if slow.maxInFlight() > 2 {
		t.Fatalf("%d concurrent requests, max_in_flight is 2", slow.maxInFlight())
	}
}

func TestCircuitPausesAFailingEndpointWithoutSpendingAttempts(t *testing.T) {
	db, _ := openDB(t)
	var healthy atomic.Bool
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	})
	ep := testEndpoint(t, db, "flaky", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = 1 })
	var ds []storage.Delivery
	for range 4 {
		ds = append(ds, accept(t, db, event{}, ep)...)
	}
	d := startDispatcher(t, db, Config{CircuitFailures: 3, CircuitCooldown: 500 * time.Millisecond}, ep)
	d.Notify()

	testsupport.WaitFor(t, wait, "the circuit to open", func() bool { return circuitOf(d, ep.ID) == circuitOpen })
	spent := func() (n int) {
		for _, dl := range ds {
			n += delivery(t, db, dl.ID).AttemptCount
		}
		return n
	}
	if n := spent(); n != 3 {
		t.Fatalf("%d attempts when the circuit opened, want 3", n)
	}
	waitForPasses(t, d, ep.ID, 5)
	if n := spent(); n != 3 || rc.count() != 3 || circuitOf(d, ep.ID) != circuitOpen {
		t.Fatalf("while open: %d attempts, %d requests; want none added", n, rc.count())
	}

	healthy.Store(true)
	for _, dl := range ds {
		testsupport.WaitFor(t, wait, "recovery", inState(t, db, dl.ID, storage.StateSucceeded))
	}
	if s := circuitOf(d, ep.ID); s != circuitClosed {
		t.Fatalf("circuit %s after recovery", s)
	}
}

func TestRateLimitPacesAttempts(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "paced", rc.URL, func(ep *storage.Endpoint) { ep.RateLimit, ep.MaxInFlight = 20, 10 })
	var ds []storage.Delivery
	for range 12 {
		ds = append(ds, accept(t, db, event{}, ep)...)
	}
	startDispatcher(t, db, Config{}, ep).Notify()
	for _, d := range ds {
		testsupport.WaitFor(t, wait, "delivery", inState(t, db, d.ID, storage.StateSucceeded))
	}
	reqs := rc.all()
	// 20/s with a burst of 2: the 12th attempt starts at least 10 intervals
	// of 50ms after the first; without a limit all 12 take milliseconds. The
	// slack is for the first request's connection setup.
	if spread := reqs[len(reqs)-1].at.Sub(reqs[0].at); spread < 300*time.Millisecond {
		t.Fatalf("12 attempts in %s at 20/s", spread)
	}
}

func TestPrivateTargetIsRefusedByDefault(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, nil)
	_, port, _ := net.SplitHostPort(rc.Listener.Addr().String())
	ep := testEndpoint(t, db, "local", "http://localhost:"+port+"/hook")
	ds := accept(t, db, event{}, ep)
	startDispatcher(t, db, Config{Client: NewClient(false)}, ep).Notify()
	testsupport.WaitFor(t, wait, "a refused attempt", func() bool { return delivery(t, db, ds[0].ID).AttemptCount >= 1 })

	as := attempts(t, db, ds[0].ID)
	if !strings.Contains(as[0].Error, "refused to connect") || !strings.Contains(as[0].Error, "loopback") || rc.count() != 0 {
		t.Fatalf("attempt %+v, %d requests; want refused before connecting", as[0], rc.count())
	}
	if s := delivery(t, db, ds[0].ID).State; s.Terminal() {
		t.Fatalf("state %s; a refused address is retried like any connection error", s)
	}
}

func TestStopLetsAnInFlightAttemptFinish(t *testing.T) {
	db, _ := openDB(t)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	ep := testEndpoint(t, db, "ep", rc.URL)
	ds := accept(t, db, event{}, ep)
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify()
	testsupport.WaitFor(t, wait, "the attempt to start", func() bool { return rc.inFlight() == 1 })

	stopped := make(chan struct{})
	go func() {
		d.Stop(wait)
		close(stopped)
	}()
	testsupport.WaitFor(t, wait, "Stop to begin", func() bool { return d.claimCtx.Err() != nil })
	select {
	case <-stopped:
		t.Fatal("Stop returned while an attempt was in flight")
	default:
	}
	close(release)
	testsupport.WaitFor(t, wait, "Stop to return", func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	if dl := delivery(t, db, ds[0].ID); dl.State != storage.StateSucceeded || dl.AttemptCount != 1 {
		t.Fatalf("after Stop: %s with %d attempts; want the in-flight attempt recorded", dl.State, dl.AttemptCount)
	}
}

func TestStopAfterGraceReleasesTheClaim(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			<-r.Context().Done()
		}
	})
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Timeout = 10 * time.Second })
	ds := accept(t, db, event{}, ep)
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify()
	testsupport.WaitFor(t, wait, "the attempt to start", func() bool { return rc.inFlight() == 1 })
	d.Stop(50 * time.Millisecond)

	dl := delivery(t, db, ds[0].ID)
	if dl.State != storage.StatePending || dl.AttemptCount != 0 || !dl.LeaseUntil.IsZero() || dl.NextAttemptAt.After(time.Now()) {
		t.Fatalf("after Stop: %+v; want released, due now, no attempt counted", dl)
	}
	startDispatcher(t, db, Config{}, ep).Notify()
	testsupport.WaitFor(t, wait, "delivery by the next dispatcher", inState(t, db, ds[0].ID, storage.StateSucceeded))
}

func TestEndpointSetChanges(t *testing.T) {
	db, _ := openDB(t)
	a, b := newReceiver(t, nil), newReceiver(t, nil)
	epA := testEndpoint(t, db, "a", a.URL)
	epB := testEndpoint(t, db, "b", b.URL)
	d := startDispatcher(t, db, Config{}, epA)

	dsB := accept(t, db, event{}, epB)
	d.UpsertEndpoint(epB)
	d.Notify(epB.ID)
	testsupport.WaitFor(t, wait, "the added endpoint", inState(t, db, dsB[0].ID, storage.StateSucceeded))

	epB.Disabled = true
	d.SetEndpoints([]storage.Endpoint{epB})
	if _, ok := endpointLoopOf(d, epA.ID); ok {
		t.Fatal("SetEndpoints kept an endpoint it was not given")
	}
	dsB = accept(t, db, event{}, epB)
	waitForPasses(t, d, epB.ID, 5)
	if s := delivery(t, db, dsB[0].ID).State; s != storage.StatePending {
		t.Fatalf("a disabled endpoint's delivery is %s", s)
	}
	epB.Disabled = false
	d.UpsertEndpoint(epB)
	testsupport.WaitFor(t, wait, "the re-enabled endpoint", inState(t, db, dsB[0].ID, storage.StateSucceeded))
	d.RemoveEndpoint(epB.ID)
	if _, ok := endpointLoopOf(d, epB.ID); ok {
		t.Fatal("RemoveEndpoint kept the endpoint")
	}
}

// assertSameKeyAndAttemptNumbers checks that every request carried the
// delivery's Idempotency-Key and attempt numbers 1, 2, 3...
func assertSameKeyAndAttemptNumbers(t *testing.T, rc *receiver, key string) {
	t.Helper()
	for i, r := range rc.all() {
		if got := r.header.Get(HeaderIdempotencyKey); got != key || r.header.Get(HeaderWebhookID) != key {
			t.Errorf("request %d: Idempotency-Key %q, want %q on every attempt", i, got, key)
		}
		if got := r.header.Get(HeaderAttempt); got != strconv.Itoa(i+1) {
			t.Errorf("request %d: hookgate-attempt %s, want %d", i, got, i+1)
		}
	}
}

// endpointLoopOf returns the loop of an endpoint.
func endpointLoopOf(d *Dispatcher, id string) (*endpointLoop, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	l, ok := d.endpoints[id]
	return l, ok
}

// circuitOf returns the state of an endpoint's circuit.
func circuitOf(d *Dispatcher, id string) circuitState {
	l, _ := endpointLoopOf(d, id)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.circuit.state
}

// waitForPasses wakes an endpoint's loop until it has planned n more
// claims: what it does while woken again and again is what it does.
func waitForPasses(t *testing.T, d *Dispatcher, id string, n int64) {
	t.Helper()
	l, _ := endpointLoopOf(d, id)
	target := l.passes.Load() + n
	testsupport.WaitFor(t, wait, "loop passes", func() bool {
		d.Notify(id)
		return l.passes.Load() >= target
	})
}

func BenchmarkClaim(b *testing.B) {
	db, _ := openDB(b)
	ep := storage.Endpoint{ID: "bench"}
	// A backlog of 10,000 due deliveries, ingested in parallel batches.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1250 {
				accept(b, db, event{}, ep)
			}
		})
	}
	wg.Wait()
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		jobs, err := db.Claim(ctx, ep.ID, time.Now(), 10, time.Minute)
		if err != nil || len(jobs) != 10 {
			b.Fatalf("claim: %v, %d jobs", err, len(jobs))
		}
		b.StopTimer()
		ids := make([]string, len(jobs))
		for i, j := range jobs {
			ids[i] = j.Delivery.ID
		}
		if err := db.Release(ctx, ids, jobs[0].Delivery.LeaseUntil, time.Now()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func TestNewValidatesConfig(t *testing.T) {
	db, _ := openDB(t)
	if _, err := New(Config{}); err == nil {
		t.Error("New without a store succeeded")
	}
	if _, err := New(Config{Store: db, Lease: time.Second, DefaultTimeout: 2 * time.Second}); err == nil {
		t.Error("New accepted a lease shorter than an attempt")
	}
	d, err := New(Config{Store: db, DefaultTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if d.cfg.Lease <= 5*time.Minute {
		t.Fatalf("lease %s; an unset lease must outlast the default timeout", d.cfg.Lease)
	}
	d.Stop(0) // never started: returns at once
	d.Stop(0)
}

// An endpoint with a large max_in_flight (any value of 1 or more is
// accepted) and a backlog at least that large is claimed in parts. Each
// pass claimed every free slot's worth in one store transaction, too big
// for Badger (ErrTxnTooBig), every time, and nothing was delivered. The
// store here has 8 MiB memtables so that 8,000 deliveries show what
// ~17,000 do with the default 32 MiB.
func TestLargeMaxInFlightWithABacklogStillDelivers(t *testing.T) {
	const n = 8000
	db, err := badger.Open(t.TempDir(), badger.Options{Logger: quiet, MemTableSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	rc := newReceiver(t, nil)
	ep := testEndpoint(t, db, "bulk", rc.URL, func(ep *storage.Endpoint) { ep.MaxInFlight = n })
	first := accept(t, db, event{}, ep)[0]
	now := time.Now().UTC()
	for done := 1; done < n; {
		k := min(n-done, 500)
		ds := make([]storage.Delivery, k)
		for i := range ds {
			d := first
			d.ID = storage.NewID("dlv_", now)
			ds[i] = d
		}
		if err := db.Enqueue(context.Background(), ds); err != nil {
			t.Fatal(err)
		}
		done += k
	}
	startDispatcher(t, db, Config{}, ep).Notify(ep.ID)
	testsupport.WaitFor(t, 60*time.Second, "the whole backlog", func() bool { return rc.count() >= n })
}

// An attempt a shutdown abandons after its grace is cut on the wire too:
// the receiver's request ends (its context is done) when Stop returns,
// not when the process exits, so a receiver that is still working learns
// that its answer will not be read, and the connection is not left open.
func TestStopAfterGraceEndsTheReceiversRequest(t *testing.T) {
	db, _ := openDB(t)
	ended := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(time.Minute):
		}
	})
	ep := testEndpoint(t, db, "ep", rc.URL, func(ep *storage.Endpoint) { ep.Timeout = time.Minute })
	accept(t, db, event{}, ep)
	d := startDispatcher(t, db, Config{}, ep)
	d.Notify()
	testsupport.WaitFor(t, wait, "the attempt to start", func() bool { return rc.inFlight() == 1 })
	d.Stop(50 * time.Millisecond)
	select {
	case <-ended:
	case <-time.After(wait):
		t.Fatalf("the receiver's request was still open %v after Stop returned", wait)
	}
}

// fakeClock is a dispatcher clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// swSignatureOK checks one v1 signature of a webhook-signature header
// against secret over "<id>.<ts>.<body>" (Standard Webhooks), without the
// official library's tolerance check against the real clock.
func swSignatureOK(t *testing.T, secret, id, ts string, body []byte, header string) bool {
	t.Helper()
	key, err := DecodeSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, s := range strings.Fields(header) {
		if s == want {
			return true
		}
	}
	return false
}

// TestRetriesFollowThePolicyOnTheDispatchersClock drives a delivery through
// its whole retry budget on a fake clock: every retry is due exactly
// initial_interval × multiplier^k after the attempt before it (capped at
// max_interval, no jitter with randomization 0), each attempt carries the
// unix time of that attempt as webhook-timestamp, signed over that
// timestamp with every secret live at that moment (a rotated secret whose
// grace ends between two attempts stops signing), the same
// Idempotency-Key and the next hookgate-attempt; the delivery is failed
// when max_attempts is reached, with every attempt on record.
func TestRetriesFollowThePolicyOnTheDispatchersClock(t *testing.T) {
	db, _ := openDB(t)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("down"))
	})
	// After the delivery is due: it is made below, after the endpoint's
	// store write, so at least a second ahead (with only +1s truncated, a
	// start near the end of a second came before the delivery's due time
	// on a loaded machine, and attempt 1 never became due).
	start := time.Now().UTC().Add(2 * time.Second).Truncate(time.Second)
	clock := &fakeClock{t: start}
	current, old := NewSecret(), NewSecret()
	ep := testEndpoint(t, db, "sched", rc.URL, func(ep *storage.Endpoint) {
		ep.Retry = storage.RetryPolicy{InitialInterval: 10 * time.Second, Multiplier: 3, MaxInterval: 60 * time.Second,
			MaxAttempts: 5, MaxElapsed: time.Hour}
		ep.Secrets = []storage.Secret{{Value: current}, {Value: old, ExpiresAt: start.Add(15 * time.Second)}}
	})
	ds := accept(t, db, event{}, ep)
	d := startDispatcher(t, db, Config{Now: clock.Now, CircuitFailures: 100}, ep)
	d.Notify()

	wantGaps := []time.Duration{10 * time.Second, 30 * time.Second, 60 * time.Second, 60 * time.Second}
	at := start
	for n := 1; n <= 5; n++ {
		testsupport.WaitFor(t, wait, "attempt "+strconv.Itoa(n), func() bool { return delivery(t, db, ds[0].ID).AttemptCount == n })
		got := delivery(t, db, ds[0].ID)
		if n == 5 {
			if got.State != storage.StateFailed {
				t.Fatalf("after max_attempts: %+v; want failed", got)
			}
			break
		}
		if got.State != storage.StatePending || !got.NextAttemptAt.Equal(at.Add(wantGaps[n-1])) {
			t.Fatalf("after attempt %d: state %s, next attempt at +%s; want pending at +%s",
				n, got.State, got.NextAttemptAt.Sub(at), wantGaps[n-1])
		}
		// Not due a second early.
		clock.set(got.NextAttemptAt.Add(-time.Second))
		waitForPasses(t, d, ep.ID, 3)
		if c := delivery(t, db, ds[0].ID).AttemptCount; c != n {
			t.Fatalf("attempt %d sent before it was due", c)
		}
		at = got.NextAttemptAt
		clock.set(at)
		d.Notify(ep.ID)
	}

	reqs := rc.all()
	as := attempts(t, db, ds[0].ID)
	if len(reqs) != 5 || len(as) != 5 {
		t.Fatalf("%d requests, %d attempts on record; want 5", len(reqs), len(as))
	}
	sentAt := start
	for i, r := range reqs {
		if i > 0 {
			sentAt = sentAt.Add(wantGaps[i-1])
		}
		ts := r.header.Get(HeaderWebhookTimestamp)
		if ts != strconv.FormatInt(sentAt.Unix(), 10) {
			t.Errorf("attempt %d: webhook-timestamp %s, want the attempt's time %d", i+1, ts, sentAt.Unix())
		}
		key := r.header.Get(HeaderWebhookID)
		if key != ds[0].IdempotencyKey || r.header.Get(HeaderIdempotencyKey) != key || r.header.Get(HeaderAttempt) != strconv.Itoa(i+1) {
			t.Errorf("attempt %d: key %q, attempt header %q", i+1, key, r.header.Get(HeaderAttempt))
		}
		sig := r.header.Get(HeaderWebhookSignature)
		if !swSignatureOK(t, current, key, ts, r.body, sig) {
			t.Errorf("attempt %d: not signed with the current secret over its own timestamp", i+1)
		}
		oldLive := sentAt.Before(start.Add(15 * time.Second))
		if got := swSignatureOK(t, old, key, ts, r.body, sig); got != oldLive {
			t.Errorf("attempt %d at +%s: signed with the rotated secret = %v, want %v (its grace ends at +15s)",
				i+1, sentAt.Sub(start), got, oldLive)
		}
		a := as[i]
		if a.N != i+1 || !a.At.Equal(sentAt) || a.StatusCode != 503 || a.Response != "down" || !strings.Contains(a.Error, "HTTP 503") {
			t.Errorf("attempt record %d: %+v", i+1, a)
		}
	}
	if !strings.Contains(as[4].Error, "max_attempts") {
		t.Errorf("last attempt error %q; want it to say max_attempts", as[4].Error)
	}
}
