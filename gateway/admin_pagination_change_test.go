package gateway

import (
	"fmt"
	"net/url"
	"testing"
)

// TestPaginationUnderChange: walking a list page by
// page while items are added, and the item a cursor names is deleted,
// never repeats an item and never skips one that existed throughout.
func TestPaginationUnderChange(t *testing.T) {
	g := startGateway(t, gwOptions{})

	// Endpoints (ordered by id; the cursor's own endpoint is deleted and
	// new ones land before and after it between pages).
	for i := range 9 {
		must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": fmt.Sprintf("p%d", i*2), "url": "http://receiver.test/p"}))
	}
	seen := map[string]int{}
	cursor, pages := "", 0
	for {
		l := must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints?limit=2&cursor="+url.QueryEscape(cursor), acmeToken, nil))
		for _, ep := range l.Data {
			seen[ep.ID]++
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
		last := l.Data[len(l.Data)-1].ID
		must[jsonMap](t, 204)(g.api("DELETE", "/endpoints/"+last, acmeToken, nil))
		pages++
		must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": fmt.Sprintf("a%d", pages), "url": "http://receiver.test/p"}))
		must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": fmt.Sprintf("z%d", pages), "url": "http://receiver.test/p"}))
	}
	for i := range 9 {
		if id := fmt.Sprintf("p%d", i*2); seen[id] != 1 {
			t.Errorf("endpoint %s seen %d times", id, seen[id])
		}
	}

	// Events and deliveries (newest first; new ones arrive between pages).
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "sink", "url": "http://127.0.0.1:1/never"}))
	var before []string
	for i := range 10 {
		st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"pg-%d","type":"t"}`, i), nil)
		before = append(before, must[jsonMap](t, 202)(st, nil, b)["id"].(string))
	}
	evSeen, dlvSeen := map[string]int{}, map[string]int{}
	for _, route := range []string{"/events", "/deliveries?endpoint=sink"} {
		cursor, n := "", 0
		for {
			sep := "?"
			if route != "/events" {
				sep = "&"
			}
			st, _, b := g.api("GET", route+sep+"limit=3&cursor="+url.QueryEscape(cursor), acmeToken, nil)
			if route == "/events" {
				l := must[apiList[eventView]](t, 200)(st, nil, b)
				for _, e := range l.Data {
					evSeen[e.ID]++
				}
				cursor = l.NextCursor
			} else {
				l := must[apiList[deliveryView]](t, 200)(st, nil, b)
				for _, d := range l.Data {
					dlvSeen[d.Event]++
				}
				cursor = l.NextCursor
			}
			if cursor == "" {
				break
			}
			n++
			g.post("open", fmt.Appendf(nil, `{"id":"new-%s-%d","type":"t"}`, route, n), nil)
		}
	}
	for _, id := range before {
		if evSeen[id] != 1 || dlvSeen[id] != 1 {
			t.Errorf("event %s seen %d times in /events, its delivery %d times in /deliveries", id, evSeen[id], dlvSeen[id])
		}
	}
}

// TestIdempotentAnswerSurvivesRestart: a stored
// answer is replayed after a restart, and the key is not executed again.
func TestIdempotentAnswerSurvivesRestart(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"url":"http://receiver.test/r"}`
	st, _, first := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "restart-key")
	if st != 201 {
		t.Fatalf("first: %d %s", st, first)
	}
	g = g.restart(gwOptions{})
	st, hdr, again := g.api("POST", "/endpoints", acmeToken, body, "Idempotency-Key", "restart-key")
	if st != 201 || string(again) != string(first) || hdr.Get(headerReplayed) != "true" {
		t.Fatalf("after restart: %d %v %s", st, hdr, again)
	}
	if n := len(must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil)).Data); n != 1 {
		t.Fatalf("%d endpoints, want 1", n)
	}
}
