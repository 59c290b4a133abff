package gateway

import (
	"fmt"
	"net/url"
	"testing"
)

// TestEndpointAndSourceListsRefuseAnotherListsCursor: a cursor belongs to
// the list that returned it. /endpoints and /sources once took any string
// that looked like an id as "the last id of the previous page": a cursor
// of /events given to /endpoints answered 200 with a page that silently
// left out every endpoint whose id sorts before "evt_…".
func TestEndpointAndSourceListsRefuseAnotherListsCursor(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, id := range []string{"alpha", "beta", "zulu"} {
		must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": id, "url": "http://127.0.0.1:1/x"}))
	}
	for i := range 2 {
		if st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"c-%d","type":"t"}`, i), nil); st != 202 {
			t.Fatalf("ingest: %d %s", st, b)
		}
	}
	evCursor := must[apiList[eventView]](t, 200)(g.api("GET", "/events?limit=1", acmeToken, nil)).NextCursor
	dlvCursor := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?limit=1", acmeToken, nil)).NextCursor
	if evCursor == "" || dlvCursor == "" {
		t.Fatalf("no cursors to reuse: %q %q", evCursor, dlvCursor)
	}
	for _, c := range []struct{ what, path string }{
		{"an /events cursor on /endpoints", "/endpoints?cursor=" + url.QueryEscape(evCursor)},
		{"a /deliveries cursor on /endpoints", "/endpoints?cursor=" + url.QueryEscape(dlvCursor)},
		{"an /events cursor on /sources", "/sources?cursor=" + url.QueryEscape(evCursor)},
	} {
		st, hdr, b := g.api("GET", c.path, acmeToken, nil)
		if st == 200 {
			l := must[apiList[endpointView]](t, 200)(st, nil, b)
			var ids []string
			for _, ep := range l.Data {
				ids = append(ids, ep.ID)
			}
			t.Errorf("%s: 200 with %v, want a 400 naming the cursor (the page silently skips what sorts before the foreign id)", c.what, ids)
			continue
		}
		wantProblem(t, c.what, 400, "cursor")(st, hdr, b)
	}
}
