package outbound

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hookgate/storage"
)

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
		waitFor(t, wait, "attempt "+strconv.Itoa(n), func() bool { return delivery(t, db, ds[0].ID).AttemptCount == n })
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
