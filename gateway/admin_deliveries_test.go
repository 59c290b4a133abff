package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
)

func TestAdminDeliveries(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("bad", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: good, tenant: acme, url: %q}
  - {id: bad, tenant: acme, url: %q, retry: {max_attempts: 2}}
`, rcv.url("good"), rcv.url("bad"))})
	// Two events: four failed attempts stay under the circuit's threshold
	// (five), which would pause the endpoint for seconds.
	ids := ingestN(t, g, "d", 2)
	failed := func() []admin.Delivery {
		return must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?status=failed", acmeToken, nil)).Data
	}
	testsupport.WaitFor(t, 20*time.Second, "2 failed deliveries", func() bool { return len(failed()) == 2 })
	testsupport.WaitFor(t, 10*time.Second, "2 good deliveries", func() bool {
		return len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?status=succeeded", acmeToken, nil)).Data) == 2
	})

	// Filters.
	for _, d := range failed() {
		if d.Endpoint != "bad" || d.State != "failed" || d.AttemptCount != 2 || d.NextAttemptAt != "" || d.LastStatus != 500 {
			t.Fatalf("failed delivery %+v", d)
		}
	}
	if l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=good", acmeToken, nil)); len(l.Data) != 2 || slices.ContainsFunc(l.Data, func(d admin.Delivery) bool { return d.Endpoint != "good" }) {
		t.Fatalf("endpoint=good: %+v", l)
	}
	byEvent := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ids[1], acmeToken, nil))
	if len(byEvent.Data) != 2 || byEvent.Data[0].Event != ids[1] || byEvent.Data[1].Event != ids[1] {
		t.Fatalf("event=%s: %+v", ids[1], byEvent)
	}
	if l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ids[1]+"&status=succeeded", acmeToken, nil)); len(l.Data) != 1 || l.Data[0].Endpoint != "good" {
		t.Fatalf("event and status: %+v", l)
	}
	// Pages of 3 over 4 deliveries.
	p1 := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=3", acmeToken, nil))
	p2 := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=3&cursor="+url.QueryEscape(p1.NextCursor), acmeToken, nil))
	if len(p1.Data) != 3 || p1.NextCursor == "" || len(p2.Data) != 1 || p2.NextCursor != "" {
		t.Fatalf("pages: %d %q, %d %q", len(p1.Data), p1.NextCursor, len(p2.Data), p2.NextCursor)
	}
	seen := map[string]bool{}
	for _, d := range append(p1.Data, p2.Data...) {
		if seen[d.ID] {
			t.Fatalf("delivery %s on two pages", d.ID)
		}
		seen[d.ID] = true
	}
	wantProblem(t, "bad status", 400, "status")(g.api("GET", "/deliveries?status=lost", acmeToken, nil))
	wantProblem(t, "event cursor for deliveries", 400, "cursor")(g.api("GET", "/deliveries?cursor="+url.QueryEscape(encodeTestCursor(ids[0])), acmeToken, nil))

	// One delivery, with every attempt.
	dl := failed()[0]
	raw := must[jsonMap](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil))
	for _, k := range []string{"id", "event", "endpoint", "idempotency_key", "state", "attempt_count", "attempts"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("delivery lacks %q: %v", k, raw)
		}
	}
	atts := raw["attempts"].([]any)
	if len(atts) != 2 {
		t.Fatalf("attempts %v", atts)
	}
	for i, a := range atts {
		at := a.(jsonMap)
		for _, k := range []string{"n", "at", "status_code", "latency_ms", "error", "response"} {
			if _, ok := at[k]; !ok {
				t.Fatalf("attempt lacks %q: %v", k, at)
			}
		}
		ts, err := time.Parse(time.RFC3339Nano, at["at"].(string))
		if at["n"] != float64(i+1) || at["status_code"] != float64(500) || at["response"] != "receiver says no" ||
			err != nil || ts.Location() != time.UTC || at["latency_ms"].(float64) < 0 {
			t.Fatalf("attempt %d: %v", i+1, at)
		}
	}

	// Retry: due now with a fresh budget, delivered once the receiver heals.
	rcv.failAt("bad", false)
	re := must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil))
	if re.ID != dl.ID || (re.State != "pending" && re.State != "delivering") || re.NextAttemptAt == "" {
		t.Fatalf("retried %+v", re)
	}
	testsupport.WaitFor(t, 10*time.Second, "the retried delivery to succeed", func() bool {
		return must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil)).State == "succeeded"
	})
	if got := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil)); len(*got.Attempts) != 3 {
		t.Fatalf("after the retry: %+v", got)
	}
	// A succeeded delivery may be sent again too.
	must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "the second retry", func() bool { return rcv.countAt("bad") == 6 })

	wantProblem(t, "unknown delivery", 404, "")(g.api("GET", "/deliveries/dlv_nope", acmeToken, nil))
	wantProblem(t, "retry unknown", 404, "")(g.api("POST", "/deliveries/dlv_nope/retry", acmeToken, nil))
	// A delivery of a deleted endpoint is cancelled and cannot be retried.
	other := failed()[0]
	must[jsonMap](t, 204)(g.api("DELETE", "/endpoints/bad", acmeToken, nil))
	p := wantProblem(t, "retry to a deleted endpoint", 409, "")(g.api("POST", "/deliveries/"+other.ID+"/retry", acmeToken, nil))
	if !strings.HasSuffix(p.Type, "endpoint-deleted") {
		t.Fatalf("problem %+v", p)
	}
}

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
	testsupport.WaitFor(t, 10*time.Second, "the first attempt in flight", func() bool { return n.Load() == 1 })
	dl := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries", acmeToken, nil)).Data[0]

	st, hdr, b := g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil)
	p := wantProblem(t, "retry in flight", 409, "")(st, hdr, b)
	if !strings.HasSuffix(p.Type, "delivery-in-flight") || hdr.Get("Retry-After") == "" {
		t.Fatalf("problem %+v, Retry-After %q", p, hdr.Get("Retry-After"))
	}
	unblock()
	testsupport.WaitFor(t, 10*time.Second, "the attempt to succeed", func() bool {
		return must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil)).State == "succeeded"
	})
	must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+dl.ID+"/retry", acmeToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "the retried delivery to succeed", func() bool {
		d := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dl.ID, acmeToken, nil))
		return d.State == "succeeded" && len(*d.Attempts) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if n.Load() != 2 || attempts[0] != "1" || attempts[1] != "2" {
		t.Fatalf("the receiver got %d requests, attempts %q; want 2, numbered 1 and 2", n.Load(), attempts)
	}
}
