package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// A subscriber answering 429 with Retry-After: 3 asks the client to send
// it nothing for 3 seconds (RFC 6585 §4, RFC 9110 §10.2.3): not only the
// retry of that delivery waits, every other delivery to the endpoint does,
// a new event's hand-off included.
func TestRetryAfterHoldsTheEndpointNotOnlyTheDelivery(t *testing.T) {
	var mu sync.Mutex
	var at []time.Time
	var until time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) == 1 {
			until = time.Now().Add(3 * time.Second)
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(at)
	}
	g := startGateway(t, gwOptions{extra: oneEndpoint(srv.URL, "initial_interval: 20ms, max_interval: 10s, randomization: 0, max_attempts: 5, max_elapsed: 1m") +
		"    max_in_flight: 1\n"})
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"ra-first","type":"t.x"}`), nil))
	waitFor(t, 5*time.Second, "the 429", func() bool { return count() >= 1 })
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"ra-second","type":"t.x"}`), nil))
	waitFor(t, 10*time.Second, "both delivered", func() bool { return count() >= 3 })
	mu.Lock()
	defer mu.Unlock()
	for i, q := range at[1:] {
		// The hold is taken at the end of the attempt, a little after the
		// receiver's clock read until.
		if q.Before(until.Add(-200 * time.Millisecond)) {
			t.Errorf("request %d reached the endpoint %v after its 429 with Retry-After: 3",
				i+2, q.Sub(at[0]).Round(time.Millisecond))
		}
	}
}

// oneEndpoint is the config of endpoint e1 of tenant acme on source open,
// sending to url with the given retry settings (YAML flow mapping items).
func oneEndpoint(url, retry string) string {
	return "endpoints:\n  - id: e1\n    tenant: acme\n    url: " + url + "\n    sources: [open]\n    secret: " + subSecretA +
		"\n    retry: {" + retry + "}\n"
}
