package gateway

import (
	"bytes"
	"fmt"
	"net/url"
	"testing"
)

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
	g := startGateway(t, gwOptions{config: func(c *Config) { c.Server.MaxBody = 1 << 20 }})
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
		l := must[apiList[eventView]](t, 200)(st, nil, b)
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
	g := startGateway(t, gwOptions{config: func(c *Config) { c.Server.MaxBody = 1 << 20 }})
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
