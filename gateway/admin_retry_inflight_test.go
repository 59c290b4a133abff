package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRetryOfADeliveryInFlightIsRefused: POST /deliveries/{id}/retry while
// the delivery's attempt is in flight would take that attempt's lease, so
// its outcome would go unrecorded and the receiver would get two requests
// numbered 1. It gets 409 with Retry-After until the attempt has ended.
func TestRetryOfADeliveryInFlightIsRefused(t *testing.T) {
	release := make(chan struct{})
	var n atomic.Int32
	var mu sync.Mutex
	var attempts []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts = append(attempts, r.Header.Get("hookgate-attempt"))
		mu.Unlock()
		if n.Add(1) == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(srv.Close)
	g := startGateway(t, gwOptions{extra: "endpoints:\n  - {id: slow, tenant: acme, url: " + srv.URL + ", max_in_flight: 1}\n"})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // first: a failed test must not leave the attempt hanging
	if st, _, b := g.post("open", []byte(`{"id":"e1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	waitFor(t, 10*time.Second, "the first attempt in flight", func() bool { return n.Load() == 1 })
	dl := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries", acmeToken, nil)).Data[0]

	st, hdr, b := g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil)
	p := wantProblem(t, "retry in flight", 409, "")(st, hdr, b)
	if !strings.HasSuffix(p.Type, "delivery-in-flight") || hdr.Get("Retry-After") == "" {
		t.Fatalf("problem %+v, Retry-After %q", p, hdr.Get("Retry-After"))
	}
	unblock()
	waitFor(t, 10*time.Second, "the attempt to succeed", func() bool {
		return must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil)).State == "succeeded"
	})
	must[deliveryView](t, 202)(g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil))
	waitFor(t, 10*time.Second, "the retried delivery to succeed", func() bool {
		d := must[deliveryView](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil))
		return d.State == "succeeded" && len(*d.Attempts) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if n.Load() != 2 || attempts[0] != "1" || attempts[1] != "2" {
		t.Fatalf("the receiver got %d requests, attempts %q; want 2, numbered 1 and 2", n.Load(), attempts)
	}
}
