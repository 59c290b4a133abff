package gateway

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// POST /deliveries/{id}/retry refuses a delivery older than its endpoint:
// after a tenant deleted endpoint "billing" and made a new one with the id
// (other URL, other event_types), retrying the old endpoint's failed
// delivery sent its event to the new endpoint, which never subscribed to
// it. A bulk replay with a status filter ("replay what failed", POST
// /replays {"status":"failed"}) did the same for every such delivery at
// once: its targets are the endpoints whose latest delivery of the event
// is in that state, and they were matched by id alone, so the old
// endpoint's failed deliveries made the new endpoint a target.
func TestStatusReplayDoesNotSendTheDeletedEndpointsFailuresToItsSuccessor(t *testing.T) {
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/first" {
			w.WriteHeader(http.StatusInternalServerError) // the first endpoint fails every attempt
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	count := func(p string) int { mu.Lock(); defer mu.Unlock(); return hits[p] }

	g := startGateway(t, gwOptions{})
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "billing", "url": srv.URL + "/first", "event_types": []string{"invoice.*"},
		"retry": jsonMap{"max_attempts": 1},
	}))
	st, _, b := g.post("open", []byte(`{"id":"inv-1","type":"invoice.paid"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	waitFor(t, 10*time.Second, "the delivery to the first endpoint to fail", func() bool {
		ds := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data
		return len(ds) == 1 && ds[0].State == "failed"
	})
	if st, _, b := g.api("DELETE", "/endpoints/billing", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	// The same tenant makes a new endpoint with the id, for other events.
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "billing", "url": srv.URL + "/second", "event_types": []string{"customer.*"},
	}))

	rpl := must[replayView](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"status": "failed"})).ID
	var job replayView
	waitFor(t, 10*time.Second, "the bulk replay to finish", func() bool {
		job = must[replayView](t, 200)(g.api("GET", "/replays/"+rpl, acmeToken, nil))
		return job.State != "running"
	})
	if job.Enqueued != 0 {
		waitFor(t, 10*time.Second, "the replayed delivery", func() bool { return count("/second") > 0 })
		t.Fatalf("a replay of what failed enqueued %d deliveries and sent invoice.paid to the new endpoint billing (event_types [customer.*]), which never subscribed to it: the failure was the deleted endpoint's", job.Enqueued)
	}
	if n := count("/second"); n != 0 {
		t.Fatalf("the new endpoint got %d requests", n)
	}
}
