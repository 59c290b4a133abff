package gateway

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// Creating an endpoint, delivering to it and deleting it, over and over,
// leaves no goroutine behind: its loop, its attempts and its backlog
// cancel all end: what a long-running gateway whose tenants churn
// endpoints relies on. The /metrics side
// of the same churn is TestMetricsStayForgottenWhenTheLastOutcomeIsCountedAfterTheDelete.
func TestEndpointChurnLeavesNoGoroutine(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{})
	round := func(i int) {
		id := fmt.Sprintf("churn-%d", i)
		must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": id, "url": rcv.url(id)}))
		st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"e-%d"}`, i), nil)
		if st != 202 {
			t.Fatalf("ingest %d: %s", st, b)
		}
		waitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() >= i+1 })
		if st, _, b := g.api("DELETE", "/endpoints/"+id, acmeToken, nil); st != 204 {
			t.Fatalf("delete %d: %s", st, b)
		}
	}
	// One round first, so that what starts lazily (pools, connections)
	// is in the baseline.
	round(0)
	base := runtime.NumGoroutine()
	const rounds = 200
	for i := 1; i <= rounds; i++ {
		round(i)
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("goroutines back to the baseline (%d) after %d endpoints", base, rounds), func() bool {
		return runtime.NumGoroutine() <= base+5
	})
}
