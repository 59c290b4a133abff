package gateway

import (
	"bytes"
	"fmt"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
)

// TestEndpointAndSourceListsRefuseAnotherListsCursor: a cursor belongs to
// the list that returned it. /endpoints and /sources once took any string
// that looked like an id as "the last id of the previous page": a cursor
// of /events given to /endpoints answered 200 with a page that silently
// left out every endpoint whose id sorts before "evt_…".
func TestEndpointAndSourceListsRefuseAnotherListsCursor(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, id := range []string{"alpha", "beta", "zulu"} {
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": id, "url": "http://127.0.0.1:1/x"}))
	}
	for i := range 2 {
		if st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"c-%d","type":"t"}`, i), nil); st != 202 {
			t.Fatalf("ingest: %d %s", st, b)
		}
	}
	evCursor := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?limit=1", acmeToken, nil)).NextCursor
	dlvCursor := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=1", acmeToken, nil)).NextCursor
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
			l := must[admin.List[admin.Endpoint]](t, 200)(st, nil, b)
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

// GET /events and GET /deliveries are "newest first": received_at (and a
// delivery's created_at) never increases down the list, also among
// records made within one millisecond. Lists are a reverse scan of the
// IDs; until IDs held the time below the millisecond, about a third of
// adjacent events of a concurrent ingest were listed oldest-first.
func TestAdminListsAreNewestFirstWithinAMillisecond(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: sink, tenant: acme, url: %q}\n", rcv.url("sink"))})
	type rec struct{ id, at string }
	parse := func(s string) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatalf("time %q: %v", s, err)
		}
		return ts
	}
	// sameMs counts pairs of records, adjacent in time, made within one
	// millisecond: the cases where the ID alone cannot order them.
	sameMs := func(rs []rec) int {
		ts := make([]time.Time, len(rs))
		for i := range rs {
			ts[i] = parse(rs[i].at)
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		n := 0
		for i := 1; i < len(ts); i++ {
			if ts[i].UnixMilli() == ts[i-1].UnixMilli() && !ts[i].Equal(ts[i-1]) {
				n++
			}
		}
		return n
	}
	events := func() []rec {
		l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?limit=1000", opToken, nil))
		out := make([]rec, len(l.Data))
		for i, e := range l.Data {
			out[i] = rec{e.ID, e.ReceivedAt}
		}
		return out
	}
	// Concurrent ingests until enough of them share a millisecond.
	sent := 0
	deadline := time.Now().Add(20 * time.Second)
	for round := 0; sameMs(events()) < 20; round++ {
		if time.Now().After(deadline) || round == 10 {
			t.Skipf("only %d same-millisecond pairs after %d events: cannot probe the order", sameMs(events()), sent)
		}
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.post("open", fmt.Appendf(nil, `{"id":"ord-%d-%d","type":"t"}`, round, i), nil)
			}()
		}
		wg.Wait()
		sent += 32
	}
	check := func(what string, rs []rec) {
		t.Helper()
		bad := 0
		for i := 1; i < len(rs); i++ {
			if parse(rs[i].at).After(parse(rs[i-1].at)) {
				if bad < 3 {
					t.Errorf("%s: %s (%s) is listed before the newer %s (%s)", what, rs[i-1].id, rs[i-1].at, rs[i].id, rs[i].at)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d adjacent pairs are oldest-first; want newest first", what, bad, len(rs)-1)
		}
	}
	check("GET /events", events())
	// The deliveries of those events (one each, to sink), likewise.
	testsupport.WaitFor(t, 20*time.Second, "a delivery per event", func() bool {
		return len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=1000", opToken, nil)).Data) == len(events())
	})
	dl := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=1000", opToken, nil))
	ds := make([]rec, len(dl.Data))
	for i, d := range dl.Data {
		ds[i] = rec{d.ID, d.CreatedAt}
	}
	check("GET /deliveries", ds)
}

// maxListAnswer bounds a page of GET /events in these tests: the store
// ends a page short, with a cursor, before its bodies pass
// storage.PageBytes (8 MiB), well below it.
const maxListAnswer = 16 << 20

// TestEventPageAnswerIsBoundedInBytes: every listed event carries its
// whole body. Bounded by ?limit= alone (up to 1000), one GET
// /events?limit=1000 by any token with the default 1 MiB max_body could
// build an answer of a GiB or more, past the default 1 GiB soft memory
// limit. A page of 24 events of 1 MiB ends short, and the cursors still
// lead to every event once.
func TestEventPageAnswerIsBoundedInBytes(t *testing.T) {
	g := startGateway(t, gwOptions{config: func(c *config.Config) { c.Server.MaxBody = 1 << 20 }})
	pad := bytes.Repeat([]byte("a"), 1<<20-100)
	const n = 24
	want := map[string]bool{}
	for i := range n {
		st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"big-%d","type":"t","x":"%s"}`, i, pad), nil)
		want[must[jsonMap](t, 202)(st, nil, b)["id"].(string)] = true
	}
	seen := map[string]int{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		st, _, b := g.api("GET", fmt.Sprintf("/events?limit=%d&cursor=%s", n, url.QueryEscape(cursor)), acmeToken, nil)
		if len(b) > maxListAnswer {
			t.Fatalf("one page of GET /events is a %d MiB answer (%d events of 1 MiB at limit=%d): nothing bounds a page's bytes", len(b)>>20, n, n)
		}
		l := must[admin.List[admin.Event]](t, 200)(st, nil, b)
		for _, ev := range l.Data {
			seen[ev.ID]++
		}
		if cursor = l.NextCursor; cursor == "" {
			break
		}
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("event %s listed %d times across the pages", id, seen[id])
		}
	}
}

// TestEventViewDoesNotInflateMarkupBodies: encoding/json's HTML-safe
// default (Fiber's c.JSON) writes <, > and & as \u003c, \u003e, \u0026,
// which made an XML or HTML webhook body (SendGrid's inbound parse, a
// SOAP-style provider) about five times its size in GET /events and GET
// /events/{id}. Nothing here is HTML: the body comes out at its own size.
func TestEventViewDoesNotInflateMarkupBodies(t *testing.T) {
	g := startGateway(t, gwOptions{config: func(c *config.Config) { c.Server.MaxBody = 1 << 20 }})
	pad := bytes.Repeat([]byte("<a>&"), 64<<10) // 256 KiB
	st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"xml","type":"t","x":"%s"}`, pad), nil)
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	for _, path := range []string{"/events/" + id, "/events"} {
		st, _, b := g.api("GET", path, acmeToken, nil)
		must[jsonMap](t, 200)(st, nil, b)
		if limit := len(pad) + 16<<10; len(b) > limit {
			t.Errorf("GET %s: a %d KiB body is a %d KiB answer (<, >, & escaped as \\u003c…)", path, len(pad)>>10, len(b)>>10)
		}
	}
}

// TestPaginationUnderChange: walking a list page by
// page while items are added, and the item a cursor names is deleted,
// never repeats an item and never skips one that existed throughout.
func TestPaginationUnderChange(t *testing.T) {
	g := startGateway(t, gwOptions{})

	// Endpoints (ordered by id; the cursor's own endpoint is deleted and
	// new ones land before and after it between pages).
	for i := range 9 {
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": fmt.Sprintf("p%d", i*2), "url": "http://receiver.test/p"}))
	}
	seen := map[string]int{}
	cursor, pages := "", 0
	for {
		l := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints?limit=2&cursor="+url.QueryEscape(cursor), acmeToken, nil))
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
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": fmt.Sprintf("a%d", pages), "url": "http://receiver.test/p"}))
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": fmt.Sprintf("z%d", pages), "url": "http://receiver.test/p"}))
	}
	for i := range 9 {
		if id := fmt.Sprintf("p%d", i*2); seen[id] != 1 {
			t.Errorf("endpoint %s seen %d times", id, seen[id])
		}
	}

	// Events and deliveries (newest first; new ones arrive between pages).
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "sink", "url": "http://127.0.0.1:1/never"}))
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
				l := must[admin.List[admin.Event]](t, 200)(st, nil, b)
				for _, e := range l.Data {
					evSeen[e.ID]++
				}
				cursor = l.NextCursor
			} else {
				l := must[admin.List[admin.Delivery]](t, 200)(st, nil, b)
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
	if st != 201 || string(again) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("after restart: %d %v %s", st, hdr, again)
	}
	if n := len(must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil)).Data); n != 1 {
		t.Fatalf("%d endpoints, want 1", n)
	}
}
