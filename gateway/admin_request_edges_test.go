package gateway

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// POST /events/{id}/replay takes an optional {"endpoints":[…]}; left out,
// it replays to every endpoint that matches now. An explicit empty list
// ("none selected") is 422 naming endpoints, and nothing is enqueued: it
// used to be read as "absent", a replay to every subscriber. (null, an
// empty POST /replays filter and a zero until are refused for the same
// reason.)
func TestReplayWithEmptyEndpointListIsRefused(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: a1, tenant: acme, url: %q}\n  - {id: a2, tenant: acme, url: %q}\n", rcv.url("a1"), rcv.url("a2"))})
	st, _, b := g.post("open", []byte(`{"id":"re-1","type":"t"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	waitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 2 })

	st, hdr, b := g.api("POST", "/events/"+evt+"/replay", acmeToken, `{"endpoints":[]}`)
	if st != 422 {
		l := must[apiList[deliveryView]](t, st)(st, hdr, b)
		var eps []string
		for _, d := range l.Data {
			eps = append(eps, d.Endpoint)
		}
		t.Fatalf(`replay with "endpoints": []: %d with new deliveries to %v; want 422 naming endpoints, nothing enqueued`, st, eps)
	}
	wantProblem(t, "empty endpoints", 422, "endpoints")(st, hdr, b)
	if n := len(must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data); n != 2 {
		t.Fatalf("%d deliveries of the event after a refused replay, want the 2 first ones", n)
	}
}

// since/until are RFC 3339 times, and RFC 3339 (section 5.6) allows "t"
// and "z" in lower case, which time.Parse alone refuses: the query
// parameters and POST /replays take them.
func TestAdminTimesAcceptLowercaseRFC3339(t *testing.T) {
	g := startGateway(t, gwOptions{})
	if st, _, b := g.post("open", []byte(`{"id":"lc-1","type":"t"}`), nil); st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	for _, v := range []string{"2020-01-01t00:00:00z", "2020-01-01T00:00:00z", "2020-01-01t00:00:00+02:00"} {
		for _, path := range []string{"/events?since=", "/deliveries?since="} {
			st, _, b := g.api("GET", path+url.QueryEscape(v), opToken, nil)
			if st != 200 {
				t.Errorf("GET %s%s: %d %s; want 200 (an RFC 3339 time)", path, v, st, b)
			}
		}
		st, _, b := g.api("POST", "/replays", opToken, jsonMap{"source": "open", "since": v})
		if st != 202 {
			t.Errorf(`POST /replays {"since": %q}: %d %s; want 202`, v, st, b)
		}
	}
}

// A 405 carries Allow (RFC 9110 section 15.5.6), also when the POST
// had an Idempotency-Key: no handler ran, so no answer is stored under the
// key (a stored one was replayed without Allow), as Stripe stores an
// answer only once an endpoint began executing.
func TestAdminIdempotentPostToARouteWithoutPostKeepsAllow(t *testing.T) {
	g := startGateway(t, gwOptions{})
	st, _, b := g.post("open", []byte(`{"id":"m-1","type":"t"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	for i := range 2 {
		st, hdr, b := g.api("POST", "/events/"+evt, opToken, `{}`, "Idempotency-Key", "k-405")
		wantProblem(t, fmt.Sprintf("POST /events/{id} try %d", i+1), 405, "-")(st, hdr, b)
		if hdr.Get("Allow") == "" {
			t.Fatalf("try %d: 405 without Allow (Idempotent-Replayed=%q); want Allow: GET, HEAD", i+1, hdr.Get(headerReplayed))
		}
		if hdr.Get(headerReplayed) != "" {
			t.Fatalf("try %d: a stored answer was replayed for a request no handler ran", i+1)
		}
	}
}

// The admin listener takes a header block of up to 16 KiB, as the ingest
// listener does (README): a request with a 10 KB header (a long bearer
// token, proxies' headers) was a 431 there at 4 KiB.
func TestAdminHeaderBlockLimitIs16KiB(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[apiList[eventView]](t, 200)(g.api("GET", "/events", opToken, nil, "X-Pad", strings.Repeat("a", 10000)))
	if st, _, b := g.api("GET", "/events", opToken, nil, "X-Pad", strings.Repeat("a", 17000)); st != 431 {
		t.Fatalf("a 17 KB header: %d %s, want 431", st, b)
	}
}
