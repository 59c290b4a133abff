package gateway

import (
	"fmt"
	"testing"
	"time"
)

// An endpoint's sources filter names source ids, and source ids are
// global. acme's endpoint keeps naming "shared-src" after acme deletes that
// source (a PATCH must not be refused for it), and globex then creates its
// own "shared-src": globex's events must never reach acme's endpoint, and
// a PATCH (by acme or by the operator) may not add globex's source to
// acme's filter either.
func TestSourceFilterNeverCrossesTenantsWhenASourceIDIsReused(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: globex-all, tenant: globex, url: %q}
`, rcv.url("globex"))})
	must[jsonMap](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "shared-src", "verify": jsonMap{"scheme": "none"}}))
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "acme-filtered", "url": rcv.url("acme"), "sources": []string{"shared-src"}}))
	if st, _, b := g.post("shared-src", []byte(`{"n":1}`), nil); st != 202 {
		t.Fatalf("acme ingest: %d %s", st, b)
	}
	waitFor(t, 10*time.Second, "acme's delivery", func() bool { return rcv.byPath()["/acme"] == 1 })

	if st, _, b := g.api("DELETE", "/sources/shared-src", acmeToken, nil); st != 204 {
		t.Fatalf("delete source: %d %s", st, b)
	}
	must[jsonMap](t, 201)(g.api("POST", "/sources", opToken, jsonMap{"id": "shared-src", "tenant": "globex", "verify": jsonMap{"scheme": "none"}}))
	// The kept filter still lets acme PATCH its endpoint.
	must[endpointView](t, 200)(g.api("PATCH", "/endpoints/acme-filtered", acmeToken, jsonMap{"timeout": "3s"}))
	// Adding globex's source is refused, for acme and for the operator.
	wantProblem(t, "acme adds globex's source", 422, "sources[1]")(g.api("PATCH", "/endpoints/acme-filtered", acmeToken,
		jsonMap{"sources": []string{"shared-src", "other"}}))
	wantProblem(t, "operator adds globex's source", 422, "sources[1]")(g.api("PATCH", "/endpoints/acme-filtered", opToken,
		jsonMap{"sources": []string{"shared-src", "other"}}))

	for i := range 3 {
		if st, _, b := g.post("shared-src", []byte(fmt.Sprintf(`{"n":%d}`, 10+i)), nil); st != 202 {
			t.Fatalf("globex ingest: %d %s", st, b)
		}
	}
	waitFor(t, 10*time.Second, "globex's deliveries", func() bool { return rcv.byPath()["/globex"] == 3 })
	// Replays of globex's events (every endpoint that matches now) stay in globex.
	job := must[replayView](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"source": "shared-src"}))
	waitReplay(t, g, opToken, job.ID)
	waitFor(t, 10*time.Second, "globex's replayed deliveries", func() bool { return rcv.byPath()["/globex"] == 6 })
	if n := rcv.byPath()["/acme"]; n != 1 {
		t.Fatalf("acme's endpoint got %d deliveries; want only acme's own event", n)
	}
	ds := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?endpoint=acme-filtered", opToken, nil)).Data
	if len(ds) != 1 {
		t.Fatalf("acme-filtered has %d deliveries; want 1", len(ds))
	}
}
