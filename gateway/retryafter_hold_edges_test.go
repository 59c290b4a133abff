package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// SPEC section 5: POST /deliveries/{id}/retry "deliver again now". An
// operator whose receiver answered 503 with Retry-After during a
// maintenance window, and who retries the delivery once it is back, gets
// 202 with next_attempt_at now. Since the Retry-After hold of the whole
// endpoint, nothing was sent until the hold ran out (up to the endpoint's
// max_interval, 1h by default), and every other delivery of the endpoint
// waited with it: only a disable and enable, or a URL change, ended it.
func TestManualRetryWhileRetryAfterHoldIsSentNow(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	g := startGateway(t, gwOptions{extra: oneEndpoint(srv.URL, "initial_interval: 20ms, max_interval: 1m, randomization: 0, max_attempts: 5, max_elapsed: 1h")})
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"held-retry","type":"t.x"}`), nil))
	var id string
	waitFor(t, 5*time.Second, "the 503 recorded", func() bool {
		l := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?endpoint=e1", acmeToken, nil))
		if len(l.Data) == 1 && l.Data[0].AttemptCount == 1 && l.Data[0].State == "pending" {
			id = l.Data[0].ID
			return true
		}
		return false
	})
	// The receiver is back; the operator retries the delivery.
	must[deliveryView](t, 202)(g.api("POST", "/deliveries/"+id+"/retry", acmeToken, nil))
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < 2 {
		if time.Now().After(deadline) {
			d := must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+id, acmeToken, nil))
			t.Fatalf("5s after POST /deliveries/%s/retry (202): the receiver got %d request(s); delivery %s, attempts %d, next_attempt_at %s; want the retry sent now",
				id, n.Load(), d.State, d.AttemptCount, d.NextAttemptAt)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdReceiver answers its first request 429 with Retry-After: ra, and
// every later one 200; n counts requests.
func holdReceiver(t *testing.T, ra string) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", ra)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// Coverage: the hold is capped at the endpoint's max_interval, so a
// receiver asking for an hour (or a far HTTP date) does not stop the
// endpoint past it; and moving the endpoint to another URL ends the hold
// of the old one at once.
func TestRetryAfterHoldCappedAndEndedByURLChange(t *testing.T) {
	t.Run("capped", func(t *testing.T) {
		srv, n := holdReceiver(t, "Sun, 06 Nov 2994 08:49:37 GMT")
		g := startGateway(t, gwOptions{extra: oneEndpoint(srv.URL, "initial_interval: 20ms, max_interval: 300ms, randomization: 0, max_attempts: 5, max_elapsed: 1h")})
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"cap-1","type":"t.x"}`), nil))
		waitFor(t, 5*time.Second, "the 429", func() bool { return n.Load() >= 1 })
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"cap-2","type":"t.x"}`), nil))
		waitFor(t, 5*time.Second, "both delivered past a capped hold", func() bool { return n.Load() >= 3 })
	})
	t.Run("url change", func(t *testing.T) {
		old, n := holdReceiver(t, "3600")
		moved, m := holdReceiver(t, "0") // its first answer, 429 with Retry-After: 0, holds nothing
		g := startGateway(t, gwOptions{extra: `endpoints: []`})
		must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "mv", "url": old.URL, "sources": []string{"open"},
			"retry": jsonMap{"initial_interval": "20ms", "max_interval": "1h", "randomization": 0, "max_attempts": 5, "max_elapsed": "2h"}}))
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"mv-1","type":"t.x"}`), nil))
		waitFor(t, 5*time.Second, "the 429", func() bool { return n.Load() >= 1 })
		must[endpointView](t, 200)(g.api("PATCH", "/endpoints/mv", acmeToken, jsonMap{"url": moved.URL}))
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"mv-2","type":"t.x"}`), nil))
		waitFor(t, 5*time.Second, "a delivery to the new URL", func() bool { return m.Load() >= 1 })
	})
}
