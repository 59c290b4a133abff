package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// ingestN posts n events to source open, types alternating a/b, and
// returns their gateway ids, oldest first.
func ingestN(t *testing.T, g *gw, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		typ := []string{"a", "b"}[i%2]
		st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"%s-%d","type":%q}`, prefix, i, typ), nil)
		ids = append(ids, must[jsonMap](t, 202)(st, nil, b)["id"].(string))
	}
	return ids
}

func TestAdminEventsList(t *testing.T) {
	g := startGateway(t, gwOptions{})
	ids := ingestN(t, g, "e", 7)
	g.post("other", []byte(`{"id":"g"}`), nil)

	all := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", acmeToken, nil))
	var got []string
	for _, ev := range all.Data {
		got = append(got, ev.ID)
	}
	// Newest first: ids sort by creation time (to the millisecond; events of
	// one millisecond come in id order).
	want := slices.Clone(ids)
	slices.Sort(want)
	slices.Reverse(want)
	if !slices.Equal(got, want) || all.NextCursor != "" {
		t.Fatalf("newest first: got %v next %q, want %v", got, all.NextCursor, want)
	}
	if n := len(must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", opToken, nil)).Data); n != 8 {
		t.Fatalf("operator sees %d events, want 8", n)
	}

	// Pages of 3 walk every event once, in order.
	var paged []string
	cursor := ""
	for pages := 0; ; pages++ {
		l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?limit=3&cursor="+url.QueryEscape(cursor), acmeToken, nil))
		for _, ev := range l.Data {
			paged = append(paged, ev.ID)
		}
		if l.NextCursor == "" {
			break
		}
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		cursor = l.NextCursor
	}
	if !slices.Equal(paged, want) {
		t.Fatalf("paged %v, want %v", paged, want)
	}

	// Filters.
	typeB := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?type=b", acmeToken, nil)).Data
	if len(typeB) != 3 { // events 1, 3 and 5 of ingestN
		t.Fatalf("type=b returned %d events, want 3", len(typeB))
	}
	for _, ev := range typeB {
		if ev.Type != "b" {
			t.Fatalf("type=b returned %+v", ev)
		}
	}
	// type is a glob, as Stripe's filter and an endpoint's event_types are.
	for q, want := range map[string]int{"type=%5Bab%5D": 7, "type=*": 7, "type=?": 7, "type=b*": 3, "type=c*": 0} {
		if l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?"+q, acmeToken, nil)); len(l.Data) != want {
			t.Fatalf("%s returned %d events, want %d", q, len(l.Data), want)
		}
	}
	if l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?source=other", opToken, nil)); len(l.Data) != 1 || l.Data[0].Source != "other" {
		t.Fatalf("source=other: %+v", l)
	}
	mid := all.Data[3]
	since := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?since="+url.QueryEscape(mid.ReceivedAt), acmeToken, nil))
	until := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?until="+url.QueryEscape(mid.ReceivedAt), acmeToken, nil))
	received := func(ev admin.Event) int64 {
		ts, err := time.Parse(time.RFC3339Nano, ev.ReceivedAt)
		if err != nil || ts.Location() != time.UTC || !strings.HasSuffix(ev.ReceivedAt, "Z") {
			t.Fatalf("received_at %q is not RFC 3339 UTC", ev.ReceivedAt)
		}
		return ts.UnixMilli()
	}
	for _, ev := range since.Data {
		if received(ev) < received(mid) {
			t.Fatalf("since returned an older event %+v", ev)
		}
	}
	for _, ev := range until.Data {
		if received(ev) > received(mid) {
			t.Fatalf("until returned a newer event %+v", ev)
		}
	}
	if len(since.Data)+len(until.Data) < len(all.Data)+1 || !slices.ContainsFunc(since.Data, func(e admin.Event) bool { return e.ID == mid.ID }) {
		t.Fatalf("since/until around %s miss events: %d + %d of %d", mid.ID, len(since.Data), len(until.Data), len(all.Data))
	}
	if l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z", acmeToken, nil)); len(l.Data) != 0 {
		t.Fatalf("a window in the past: %+v", l)
	}

	// Bad filters name their field.
	for q, field := range map[string]string{
		"limit=0": "limit", "limit=1001": "limit", "limit=x": "limit", "limit=-1": "limit",
		"since=yesterday": "since", "until=2026-13-01T00:00:00Z": "until", "since=1700000000": "since",
		"since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z": "since",
		"cursor=bm9wZQ": "cursor", "cursor=%25%25%25": "cursor",
		// The zero time would be "no bound".
		"until=0001-01-01T00:00:00Z": "until",
		// A misspelt or repeated filter is refused, not ignored: it
		// listed everything, as if it matched.
		"typ=invoice.paid": "typ", "type=a&type=b": "type", "status=failed": "status",
		"type=invoice.%5B": "type", // a malformed glob
	} {
		wantProblem(t, q, 400, field)(g.api("GET", "/events?"+q, acmeToken, nil))
	}
	wantProblem(t, "?state= on /deliveries", 400, "state")(g.api("GET", "/deliveries?state=failed", acmeToken, nil))
	wantProblem(t, "?since= on /endpoints", 400, "since")(g.api("GET", "/endpoints?since=2026-01-01T00:00:00Z", acmeToken, nil))
	must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?limit=1000", acmeToken, nil))
}

func TestAdminEventGet(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: all, tenant: acme, url: %q}\n", rcv.url("all"))})
	body := `{"id":"get-1","type":"invoice.paid","note":"héllo"}`
	st, _, b := g.post("open", []byte(body), map[string]string{"X-Custom": "yes", "Authorization": "Bearer provider-secret"})
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })

	raw := must[jsonMap](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
	for _, k := range []string{"id", "tenant", "source", "event_id", "type", "received_at", "content_type", "headers", "body", "deliveries", "idempotency_key"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("event lacks %q: %v", k, raw)
		}
	}
	if _, ok := raw["body_base64"]; ok {
		t.Fatalf("a UTF-8 body is also sent as base64: %v", raw)
	}
	ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
	if *ev.Body != body || ev.EventID != "get-1" || ev.Type != "invoice.paid" || ev.Tenant != "acme" || ev.ContentType != "application/json" {
		t.Fatalf("event %+v", ev)
	}
	if ev.Headers["X-Custom"] != "yes" || ev.Headers["Authorization"] != "" {
		t.Fatalf("headers %v: want X-Custom, never Authorization", ev.Headers)
	}
	if len(*ev.Deliveries) != 1 || (*ev.Deliveries)[0].Endpoint != "all" || (*ev.Deliveries)[0].IdempotencyKey != ev.IdempotencyKey {
		t.Fatalf("deliveries %+v", *ev.Deliveries)
	}
	testsupport.WaitFor(t, 10*time.Second, "the delivery to be recorded", func() bool {
		ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
		return (*ev.Deliveries)[0].State == "succeeded"
	})

	// A body that is not UTF-8 comes back as base64, byte for byte.
	bin := []byte{0xff, 0xfe, 0x00, 'x'}
	st, _, b = g.post("open", bin, nil)
	id = must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	raw = must[jsonMap](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
	if _, ok := raw["body"]; ok || raw["body_base64"] != base64.StdEncoding.EncodeToString(bin) {
		t.Fatalf("binary body: %v", raw)
	}
	wantProblem(t, "unknown event", 404, "")(g.api("GET", "/events/evt_nope", acmeToken, nil))
}

func TestAdminPublish(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: orders, tenant: acme, url: %q, event_types: ["order.*"]}
  - {id: globex, tenant: globex, url: %q}
`, rcv.url("orders"), rcv.url("globex"))})
	pub := jsonMap{"source": "open", "type": "order.created", "payload": jsonMap{"n": 1}, "event_id": "pub-1"}
	st, hdr, first := g.api("POST", "/events", acmeToken, pub)
	acc := must[jsonMap](t, 202)(st, hdr, first)
	if !strings.HasPrefix(acc["id"].(string), "evt_") || acc["event_id"] != "pub-1" || len(acc) != 2 || hdr.Get(inbound.HeaderReplayed) != "" {
		t.Fatalf("publish: %s %v", first, hdr)
	}
	testsupport.WaitFor(t, 10*time.Second, "the published event's delivery", func() bool { return rcv.count() == 1 })
	got := rcv.all()[0]
	if got.path != "/orders" || string(got.body) != `{"n":1}` || got.header.Get("hookgate-event-type") != "order.created" ||
		got.header.Get("hookgate-source") != "open" || got.header.Get("Content-Type") != "application/json" {
		t.Fatalf("delivered %s %s %v", got.path, got.body, got.header)
	}

	// The same event id again: the first answer, replayed; nothing new.
	st, hdr, again := g.api("POST", "/events", acmeToken, pub)
	if st != 202 || string(again) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("republish: %d %s %q", st, again, hdr.Get(inbound.HeaderReplayed))
	}
	// ... and through ingest too: one dedupe for both ways in.
	if st, hdr, b := g.post("open", []byte(`{"n":1}`), map[string]string{"Idempotency-Key": "pub-1"}); st != 202 || string(b) != string(first) || hdr.Get(inbound.HeaderReplayed) != "true" {
		t.Fatalf("ingest of the published id: %d %s", st, b)
	}
	pub["payload"] = jsonMap{"n": 2}
	p := wantProblem(t, "different payload", 422, "-")(g.api("POST", "/events", acmeToken, pub))
	if !strings.HasSuffix(p.Type, "idempotency-key-reused") {
		t.Fatalf("problem %+v", p)
	}

	// Without event_id: the source's expression on the payload (open: json:/id).
	acc = must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, jsonMap{"source": "open", "payload": jsonMap{"id": "from-payload", "type": "order.x"}}))
	if acc["event_id"] != "from-payload" {
		t.Fatalf("event id %v", acc)
	}
	ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+acc["id"].(string), acmeToken, nil))
	if ev.Type != "order.x" || ev.Tenant != "acme" {
		t.Fatalf("type from the source's expression: %+v", ev)
	}
	// An operator publishes in the source's tenant.
	acc = must[jsonMap](t, 202)(g.api("POST", "/events", opToken, jsonMap{"source": "other", "type": "t", "payload": []int{1, 2}}))
	if ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+acc["id"].(string), opToken, nil)); ev.Tenant != "globex" || *ev.Body != "[1,2]" {
		t.Fatalf("operator publish %+v", ev)
	}
	testsupport.WaitFor(t, 10*time.Second, "the globex delivery", func() bool { return rcv.byPath()["/globex"] == 1 })

	// Refusals.
	wantProblem(t, "unknown source", 422, "source")(g.api("POST", "/events", acmeToken, jsonMap{"source": "nope", "payload": jsonMap{}}))
	wantProblem(t, "no source", 422, "source")(g.api("POST", "/events", acmeToken, jsonMap{"payload": jsonMap{}}))
	wantProblem(t, "no payload", 422, "payload")(g.api("POST", "/events", acmeToken, jsonMap{"source": "open"}))
	wantProblem(t, "null payload", 422, "payload")(g.api("POST", "/events", acmeToken, `{"source":"open","payload":null}`))
	wantProblem(t, "unknown field", 400, "data")(g.api("POST", "/events", acmeToken, jsonMap{"source": "open", "data": jsonMap{}}))
	wantProblem(t, "wrong type", 400, "type")(g.api("POST", "/events", acmeToken, `{"source":"open","type":5,"payload":{}}`))
	big := jsonMap{"source": "open", "payload": jsonMap{"pad": strings.Repeat("x", 5<<10)}}
	wantProblem(t, "payload over server.max_body", 413, "payload")(g.api("POST", "/events", acmeToken, big))
	wantProblem(t, "event id too long", 400, "-")(g.api("POST", "/events", acmeToken, jsonMap{"source": "open", "payload": jsonMap{}, "event_id": strings.Repeat("i", 600)}))
}

func TestAdminReplayEvent(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: a, tenant: acme, url: %q}
  - {id: b, tenant: acme, url: %q, event_types: ["never.*"]}
  - {id: off, tenant: acme, url: %q}
  - {id: g, tenant: globex, url: %q}
`, rcv.url("a"), rcv.url("b"), rcv.url("off"), rcv.url("g"))})
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/off", opToken, jsonMap{"disabled": true}))
	st, _, b := g.post("open", []byte(`{"id":"r1","type":"invoice.paid"}`), nil)
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })

	// Default: every endpoint that matches now (a; not b, not the disabled one).
	re := must[admin.List[admin.Delivery]](t, 202)(g.api("POST", "/events/"+id+"/replay", acmeToken, nil))
	ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
	if len(re.Data) != 1 || re.Data[0].Endpoint != "a" || re.Data[0].Event != id || re.Data[0].IdempotencyKey != ev.IdempotencyKey || re.Data[0].State != "pending" {
		t.Fatalf("replay: %+v", re)
	}
	testsupport.WaitFor(t, 10*time.Second, "the replayed delivery", func() bool { return rcv.byPath()["/a"] == 2 })
	reqs := rcv.all()
	if k0, k1 := reqs[0].header.Get("Idempotency-Key"), reqs[1].header.Get("Idempotency-Key"); k0 == "" || k0 != k1 || k0 != ev.IdempotencyKey {
		t.Fatalf("the replay carries Idempotency-Key %q, the original %q", k1, k0)
	}
	// Named endpoints, even one whose filters do not match; duplicates once.
	re = must[admin.List[admin.Delivery]](t, 202)(g.api("POST", "/events/"+id+"/replay", acmeToken, jsonMap{"endpoints": []string{"b", "b"}}))
	if len(re.Data) != 1 || re.Data[0].Endpoint != "b" {
		t.Fatalf("replay to b: %+v", re)
	}
	testsupport.WaitFor(t, 10*time.Second, "the delivery to b", func() bool { return rcv.byPath()["/b"] == 1 })
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data); n != 3 {
		t.Fatalf("%d deliveries of the event, want 3", n)
	}
	wantProblem(t, "unknown endpoint", 422, "endpoints[1]")(g.api("POST", "/events/"+id+"/replay", acmeToken, jsonMap{"endpoints": []string{"a", "nope"}}))
	wantProblem(t, "other tenant's endpoint", 422, "endpoints[0]")(g.api("POST", "/events/"+id+"/replay", opToken, jsonMap{"endpoints": []string{"g"}}))
	wantProblem(t, "disabled endpoint", 409, "endpoints[0]")(g.api("POST", "/events/"+id+"/replay", acmeToken, jsonMap{"endpoints": []string{"off"}}))
	wantProblem(t, "bad body", 400, "endpoints")(g.api("POST", "/events/"+id+"/replay", acmeToken, `{"endpoints":"a"}`))
	wantProblem(t, "unknown event", 404, "")(g.api("POST", "/events/evt_nope/replay", acmeToken, nil))
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+id, acmeToken, nil)).Data); n != 3 {
		t.Fatalf("refused replays added deliveries: %d", n)
	}
}

// GET /events/{id} shows the event with "its deliveries" (SPEC section
// 5): a page of them, and when there are more (a tenant with over 1,000
// endpoints, an event replayed many times) a cursor to the rest for GET
// /deliveries?event=. The oldest, the original delivery among them, were
// cut from the array with nothing saying so.
func TestEventViewLeadsToEveryDelivery(t *testing.T) {
	g := startGateway(t, gwOptions{})
	st, _, b := g.post("open", []byte(`{"id":"many","type":"t"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	ev, err := g.Store().GetEvent(context.Background(), evt)
	if err != nil {
		t.Fatal(err)
	}
	// 1,001 deliveries to an endpoint that does not exist: nobody sends
	// them, they stay pending (the same as replays to a real endpoint).
	eps := make([]storage.Endpoint, 1001)
	for i := range eps {
		eps[i] = storage.Endpoint{ID: "gone", Tenant: "acme"}
	}
	if err := g.Store().Enqueue(context.Background(), storage.NewDeliveries(&ev, eps, time.Now().UTC())); err != nil {
		t.Fatal(err)
	}
	v := must[admin.Event](t, 200)(g.api("GET", "/events/"+evt, acmeToken, nil))
	seen := map[string]bool{}
	for _, d := range *v.Deliveries {
		seen[d.ID] = true
	}
	for cursor := v.DeliveriesNextCursor; cursor != ""; {
		page := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt+"&cursor="+url.QueryEscape(cursor), acmeToken, nil))
		for _, d := range page.Data {
			if d.Event != evt || seen[d.ID] {
				t.Fatalf("delivery %s (event %s) listed again or not the event's", d.ID, d.Event)
			}
			seen[d.ID] = true
		}
		cursor = page.NextCursor
	}
	if len(seen) != 1001 {
		t.Fatalf("GET /events/{id} and its cursor lead to %d deliveries of the event's 1001", len(seen))
	}
}

// GET /events?type=: a lone backslash, an open class or a glob over 128
// bytes (each costs its length times a type's per event scanned) is a 400
// naming "type"; a glob of escapes only and a literal type with "/" list.
func TestAdminEventsTypeGlobEdges(t *testing.T) {
	g := startGateway(t, gwOptions{})
	ingestN(t, g, "e", 4)
	for _, q := range []string{"type=%5C", "type=%5B", "type=a%5C", "type=%5B%5D", "type=*" + strings.Repeat("a", 128) + "b"} {
		wantProblem(t, q, 400, "type")(g.api("GET", "/events?"+q, acmeToken, nil))
	}
	for q, want := range map[string]int{"type=%5Ca": 2, "type=%5C%2A": 0, "type=orders/create": 0, "type=orders%2F*": 0, "type=": 4, "type=" + strings.Repeat("a", 300): 0} {
		if l := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?"+q, acmeToken, nil)); len(l.Data) != want {
			t.Fatalf("%s: %d events, want %d", q, len(l.Data), want)
		}
	}
}

// A publish without event_id, whose payload the source's expression finds
// no id in, is named by its Idempotency-Key, as an ingest request is
// (SPEC section 2's fallback): two publishes of one payload under two keys
// are two events (they were one, by the payload's hash), one under the
// same key is one. Without a key the payload's hash names it, as before.
func TestPublishWithoutEventIDIsNamedByItsKey(t *testing.T) {
	g := startGateway(t, gwOptions{})
	pub := jsonMap{"source": "open", "type": "ping", "payload": jsonMap{"hello": "world"}}
	a := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub, "Idempotency-Key", "ping-1"))
	b := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub, "Idempotency-Key", "ping-2"))
	if a["event_id"] != "ping-1" || b["event_id"] != "ping-2" || a["id"] == b["id"] {
		t.Fatalf("two keys: %v and %v, want two events named by their keys", a, b)
	}
	if again := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub, "Idempotency-Key", "ping-1")); again["id"] != a["id"] {
		t.Fatalf("the same key again: %v, want %v", again, a)
	}
	c := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub))
	d := must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, pub))
	if c["id"] != d["id"] || len(c["event_id"].(string)) != 64 {
		t.Fatalf("without a key: %v and %v, want one event named by the payload's hash", c, d)
	}
	// Three events in all.
	if evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", acmeToken, nil)).Data; len(evs) != 3 {
		t.Fatalf("%d events, want 3", len(evs))
	}
}

// TestPublishPayloadWithLoneSurrogateIsForwarded: POST /events
// stores its payload byte for byte (a json.RawMessage: encoding/json never
// rewrites it), as ingest stores a body. A provider's JSON with a lone
// surrogate escape (JavaScript's JSON.stringify of a string cut inside an
// emoji writes "\ud83d") is accepted by POST /ingest/open; the same
// payload published through the admin API is accepted too, as nullField
// leaves the payload alone. (The lone-surrogate check refused it: 400.)
func TestPublishPayloadWithLoneSurrogateIsForwarded(t *testing.T) {
	g := startGateway(t, gwOptions{})
	payload := `{"id":"trunc-1","type":"note","text":"cut inside an emoji \ud83d"}`

	if st, _, b := g.post("open", []byte(payload), map[string]string{"Content-Type": "application/json"}); st != http.StatusAccepted {
		t.Fatalf("ingest of the payload: %d %s", st, b)
	}
	body := `{"source":"open","type":"note","event_id":"trunc-2","payload":` + payload + `}`
	st, _, b := g.api("POST", "/events", acmeToken, body)
	if st != http.StatusAccepted {
		t.Fatalf("POST /events with a lone surrogate escape inside its payload: %d %s, want 202 (the payload is forwarded byte for byte)", st, b)
	}
}

// Every event ends in a state a user can list (GET /events?state=), and a
// bulk replay of the unmatched ones delivers what arrived before its
// endpoint existed.
func TestAdminEventStates(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("bad", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: bad, tenant: acme, url: %q, event_types: ["fail.*"], retry: {max_attempts: 1}}
`, rcv.url("bad"))})
	id := func(st int, _ http.Header, b []byte) string { return must[jsonMap](t, 202)(st, nil, b)["id"].(string) }
	early := id(g.post("open", []byte(`{"id":"early","type":"order.paid"}`), nil))
	failed := id(g.post("open", []byte(`{"id":"f1","type":"fail.me"}`), nil))
	listed := func(state string) []string {
		var ids []string
		// Of source open: the failed delivery's operational event (source
		// hookgate) is acme's too, and unmatched.
		for _, ev := range must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events?source=open&state="+state, acmeToken, nil)).Data {
			ids = append(ids, ev.ID)
		}
		return ids
	}
	testsupport.WaitFor(t, 10*time.Second, "the failed delivery", func() bool { return slices.Equal(listed("failed"), []string{failed}) })
	if got := listed("unmatched"); !slices.Equal(got, []string{early}) {
		t.Fatalf("unmatched: %v, want [%s]", got, early)
	}
	if ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+failed, acmeToken, nil)); ev.State != "failed" {
		t.Fatalf("GET /events/%s: state %q, want failed", failed, ev.State)
	}
	wantProblem(t, "a state that is none", 400, "state")(g.api("GET", "/events?state=lost", acmeToken, nil))

	// The endpoint the early event was for exists now.
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "late", "url": rcv.url("late"), "event_types": []string{"order.*"}}))
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"event_state": "unmatched"}))
	if job = waitReplay(t, g, acmeToken, job.ID); job.Matched != 1 || job.Enqueued != 1 || job.EventState != "unmatched" {
		t.Fatalf("replay of the unmatched events: %+v", job)
	}
	testsupport.WaitFor(t, 10*time.Second, "the early event delivered", func() bool { return slices.Equal(listed("delivered"), []string{early}) })
	if got := listed("unmatched"); len(got) != 0 {
		t.Fatalf("unmatched after the replay: %v", got)
	}
	if rcv.countAt("late") != 1 {
		t.Fatalf("the late endpoint got %d deliveries, want 1", rcv.countAt("late"))
	}
	wantProblem(t, "a replay of a state that is none", 422, "event_state")(g.api("POST", "/replays", acmeToken, jsonMap{"event_state": "gone"}))
}
