package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/gateway/problem"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
)

// Contract tests of the admin API (SPEC section 5), black box: real
// gateway, real Badger store, real HTTP.

// globexScopedToken is a third token, scoped to globex, added to testConfig.
const globexScopedToken = "globex-token-for-review"

// startContractGateway starts a gateway with a globex-scoped token besides testConfig's.
func startContractGateway(t *testing.T, extra string) *gw {
	t.Helper()
	return startGateway(t, gwOptions{extra: extra, config: func(c *config.Config) {
		c.Admin.Tokens = append(c.Admin.Tokens, config.TokenConfig{Token: globexScopedToken, Tenant: "globex"})
	}})
}

// contractProblem checks that an answer is an RFC 9457 problem with the status.
func contractProblem(t *testing.T, what string, wantStatus int, st int, hdr http.Header, body []byte) problem.Details {
	t.Helper()
	if st != wantStatus {
		t.Fatalf("%s: status %d, want %d: %s", what, st, wantStatus, body)
	}
	p := decodeProblem(t, hdr, body)
	if p.Status != wantStatus || p.Type == "" || p.Title == "" {
		t.Fatalf("%s: problem %s lacks type/title/status", what, body)
	}
	return p
}

// POST /events with an event_id already published but another type is
// not the same event: SPEC section 3/5 "same event ID, different body: 422"
// (a publish's request is its type and payload). Accepting it as a
// duplicate silently drops the second event's type.
func TestPublishSameEventIDOtherTypeIsNotADuplicate(t *testing.T) {
	g := startContractGateway(t, "")
	first := jsonMap{"source": "open", "event_id": "e-type", "type": "invoice.paid", "payload": jsonMap{"n": 1}}
	st, _, b := g.api("POST", "/events", acmeToken, first)
	if st != 202 {
		t.Fatalf("publish: %d %s", st, b)
	}
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	second := jsonMap{"source": "open", "event_id": "e-type", "type": "invoice.failed", "payload": jsonMap{"n": 1}}
	st, hdr, b2 := g.api("POST", "/events", acmeToken, second)
	if st != 422 {
		ev := must[admin.Event](t, 200)(g.api("GET", "/events/"+id, acmeToken, nil))
		t.Fatalf("publishing event_id e-type again with type invoice.failed (first was invoice.paid) answered %d "+
			"(Idempotent-Replayed=%q) %s; the stored event keeps type %q, so the user's invoice.failed is silently lost; "+
			"want 422 idempotency-key-reused as for a changed body", st, hdr.Get(inbound.HeaderReplayed), b2, ev.Type)
	}
	p := contractProblem(t, "second publish", 422, st, hdr, b2)
	if !strings.HasSuffix(p.Type, "idempotency-key-reused") {
		t.Fatalf("problem type %q", p.Type)
	}
}

// Idempotency-Key is scoped to the token's tenant (SPEC section 5): two
// tenants sending the same key with the same request each get their own
// execution, never the other's stored answer.
func TestSameIdempotencyKeyInTwoTenantsIsIndependent(t *testing.T) {
	g := startContractGateway(t, "")
	const key = "shared-key-1"
	type run struct{ token, source string }
	for _, route := range []struct {
		path string
		body func(source string) any
	}{
		{"/events", func(s string) any { return jsonMap{"source": s, "type": "t", "payload": jsonMap{"same": true}} }},
		{"/replays", func(string) any { return jsonMap{"status": "failed"} }},
		{"/endpoints", func(string) any { return jsonMap{"url": "http://receiver.test/same"} }},
	} {
		k := key + route.path
		var bodies [][]byte
		for _, r := range []run{{acmeToken, "open"}, {globexScopedToken, "other"}} {
			st, hdr, b := g.api("POST", route.path, r.token, route.body(r.source), "Idempotency-Key", k)
			if st/100 != 2 || hdr.Get(inbound.HeaderReplayed) != "" {
				t.Fatalf("POST %s as %s with key %q: %d replayed=%q %s; want it executed for this tenant", route.path, r.token, k, st, hdr.Get(inbound.HeaderReplayed), b)
			}
			bodies = append(bodies, b)
		}
		if bytes.Equal(bodies[0], bodies[1]) {
			t.Fatalf("POST %s: acme and globex got the same answer %s under one key", route.path, bodies[0])
		}
		for i, tok := range []string{acmeToken, globexScopedToken} {
			id := must[jsonMap](t, 0)(0, nil, bodies[i])["id"].(string)
			res := map[string]string{"/events": "/events/", "/replays": "/replays/", "/endpoints": "/endpoints/"}[route.path]
			v := must[jsonMap](t, 200)(g.api("GET", res+id, tok, nil))
			want := map[string]string{acmeToken: "acme", globexScopedToken: "globex"}[tok]
			if v["tenant"] != want {
				t.Fatalf("%s%s made under %s's key is of tenant %v", res, id, tok, v["tenant"])
			}
		}
	}
}

// Every POST of the admin API replays, under the same Idempotency-Key and
// request, the stored status and body byte for byte, with
// Idempotent-Replayed: true, and does nothing again; the key with another
// body is a 422 problem (SPEC section 5).
func TestEveryPostReplaysItsStoredAnswerAndRunsOnce(t *testing.T) {
	rcv := newReceiver(t)
	g := startContractGateway(t, fmt.Sprintf("endpoints:\n  - {id: ep1, tenant: acme, url: %q}\n", rcv.url("ep1")))
	st, _, b := g.post("open", []byte(`{"id":"idem-1","type":"t"}`), nil)
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })
	dlv := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data[0].ID
	testsupport.WaitFor(t, 10*time.Second, "the delivery to succeed", func() bool {
		return must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+dlv, acmeToken, nil)).State == "succeeded"
	})
	deliveries := func() int {
		return len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?limit=1000", acmeToken, nil)).Data)
	}
	secret := func() string {
		return must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep1", acmeToken, nil)).Secret
	}

	for i, c := range []struct {
		path        string
		body, other string
		effect      func() string // what must not change when replayed
	}{
		{"/events", `{"source":"open","type":"t","payload":{"id":"pub-1"}}`, `{"source":"open","type":"t","payload":{"id":"pub-2"}}`,
			func() string {
				return fmt.Sprint(len(must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", acmeToken, nil)).Data))
			}},
		{"/events/" + evt + "/replay", `{"endpoints":["ep1"]}`, `{}`, func() string { return fmt.Sprint(deliveries()) }},
		{"/deliveries/" + dlv + "/retry", ``, `{}`, func() string { return "" }},
		{"/replays", `{"source":"open"}`, `{"source":"sw"}`, func() string { return fmt.Sprint(deliveries()) }},
		{"/endpoints", `{"url":"http://receiver.test/x"}`, `{"url":"http://receiver.test/y"}`,
			func() string {
				return fmt.Sprint(len(must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil)).Data))
			}},
		{"/endpoints/ep1/rotate-secret", `{"grace":"1h"}`, `{"grace":"2h"}`, secret},
		{"/sources", `{"id":"made","verify":{"scheme":"none"}}`, `{"id":"made2","verify":{"scheme":"none"}}`,
			func() string {
				return fmt.Sprint(len(must[admin.List[admin.Source]](t, 200)(g.api("GET", "/sources", acmeToken, nil)).Data))
			}},
	} {
		key := fmt.Sprintf("every-post-%d", i)
		var body any
		if c.body != "" {
			body = c.body
		}
		st1, h1, b1 := g.api("POST", c.path, acmeToken, body, "Idempotency-Key", key)
		if st1/100 != 2 {
			t.Fatalf("POST %s: %d %s", c.path, st1, b1)
		}
		// The first run's background work (a bulk replay) must be done
		// before "nothing happened again" can be checked.
		if c.path == "/replays" {
			id := must[jsonMap](t, 202)(st1, nil, b1)["id"].(string)
			testsupport.WaitFor(t, 10*time.Second, "the bulk replay", func() bool {
				return must[admin.Replay](t, 200)(g.api("GET", "/replays/"+id, acmeToken, nil)).State == "completed"
			})
		}
		before := c.effect()
		st2, h2, b2 := g.api("POST", c.path, acmeToken, body, "Idempotency-Key", key)
		if st2 != st1 || !bytes.Equal(b1, b2) || h2.Get(inbound.HeaderReplayed) != "true" || h2.Get("Content-Type") != h1.Get("Content-Type") {
			t.Errorf("POST %s again under key %q: %d %q replayed=%q %s; first was %d %q %s; want the same status and bytes with Idempotent-Replayed: true",
				c.path, key, st2, h2.Get("Content-Type"), h2.Get(inbound.HeaderReplayed), b2, st1, h1.Get("Content-Type"), b1)
		}
		if c.path == "/replays" {
			id := must[jsonMap](t, 202)(st2, nil, b2)["id"].(string)
			testsupport.WaitFor(t, 10*time.Second, "the bulk replay", func() bool {
				return must[admin.Replay](t, 200)(g.api("GET", "/replays/"+id, acmeToken, nil)).State == "completed"
			})
		}
		if after := c.effect(); after != before {
			t.Errorf("POST %s replayed under key %q ran again: %q became %q", c.path, key, before, after)
		}
		st3, h3, b3 := g.api("POST", c.path, acmeToken, c.other, "Idempotency-Key", key)
		p := contractProblem(t, "POST "+c.path+" with the key and another body", 422, st3, h3, b3)
		if !strings.HasSuffix(p.Type, "idempotency-key-reused") || h3.Get(inbound.HeaderReplayed) != "" {
			t.Errorf("POST %s with key %q and another body: %s replayed=%q", c.path, key, b3, h3.Get(inbound.HeaderReplayed))
		}
	}
}

// A tenant's listings never show another tenant's items, whatever the
// filters, and whatever cursor it sends: one taken from the operator's
// listing (which interleaves both tenants) included.
func TestTenantListingsWithForeignCursorsAndFilters(t *testing.T) {
	rcv := newReceiver(t)
	g := startContractGateway(t, fmt.Sprintf("endpoints:\n  - {id: acme-ep, tenant: acme, url: %q}\n  - {id: globex-ep, tenant: globex, url: %q}\n",
		rcv.url("acme"), rcv.url("globex")))
	var gEvt string
	for i := range 6 {
		src := "open"
		if i%2 == 1 {
			src = "other"
		}
		st, _, b := g.post(src, fmt.Appendf(nil, `{"id":"x-%d","type":"t.%d"}`, i, i), nil)
		id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
		if src == "other" {
			gEvt = id
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "6 deliveries", func() bool { return rcv.count() == 6 })
	var opCursors []string
	for _, route := range []string{"/events", "/deliveries", "/endpoints", "/sources"} {
		for cursor := ""; ; {
			l := must[admin.List[jsonMap]](t, 200)(g.api("GET", route+"?limit=1&cursor="+url.QueryEscape(cursor), opToken, nil))
			if l.NextCursor == "" {
				break
			}
			cursor = l.NextCursor
			opCursors = append(opCursors, route+"|"+cursor)
		}
	}
	filters := map[string][]string{
		"/events":     {"", "source=other", "type=t.*", "type=t.1", "since=2000-01-01T00:00:00Z", "until=2999-01-01T00:00:00Z"},
		"/deliveries": {"", "endpoint=globex-ep", "event=" + gEvt, "status=succeeded", "since=2000-01-01T00:00:00Z"},
		"/endpoints":  {""},
		"/sources":    {""},
	}
	for _, tok := range []struct{ token, tenant string }{{acmeToken, "acme"}, {globexScopedToken, "globex"}} {
		check := func(path string) {
			t.Helper()
			st, hdr, b := g.api("GET", path, tok.token, nil)
			if st == 400 {
				contractProblem(t, path, 400, st, hdr, b)
				return
			}
			l := must[admin.List[jsonMap]](t, 200)(st, hdr, b)
			for _, item := range l.Data {
				if item["tenant"] != tok.tenant {
					t.Errorf("GET %s as %s shows %v of tenant %v", path, tok.tenant, item["id"], item["tenant"])
				}
			}
		}
		for route, fs := range filters {
			for _, f := range fs {
				check(route + "?" + f)
				for _, c := range opCursors {
					r, cur, _ := strings.Cut(c, "|")
					if r == route {
						check(route + "?" + f + "&cursor=" + url.QueryEscape(cur))
					}
				}
			}
		}
	}
}

// since and until bound received_at (events) and created_at
// (deliveries) inclusively, to the nanosecond the API shows.
func TestTimeFiltersAreInclusiveAtTheShownTime(t *testing.T) {
	rcv := newReceiver(t)
	g := startContractGateway(t, fmt.Sprintf("endpoints:\n  - {id: acme-ep, tenant: acme, url: %q}\n", rcv.url("acme")))
	for i := range 3 {
		st, _, b := g.post("open", fmt.Appendf(nil, `{"id":"tf-%d","type":"t"}`, i), nil)
		must[jsonMap](t, 202)(st, nil, b)
	}
	evs := must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", acmeToken, nil)).Data
	ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries", acmeToken, nil)).Data
	if len(evs) != 3 || len(ds) != 3 {
		t.Fatalf("%d events, %d deliveries", len(evs), len(ds))
	}
	q := url.QueryEscape
	for _, c := range []struct {
		route, at, id string
	}{
		{"/events", evs[1].ReceivedAt, evs[1].ID},
		{"/deliveries", ds[1].CreatedAt, ds[1].ID},
	} {
		for _, f := range []string{"since=" + q(c.at) + "&until=" + q(c.at), "until=" + q(c.at) + "&limit=1", "since=" + q(c.at)} {
			l := must[admin.List[jsonMap]](t, 200)(g.api("GET", c.route+"?"+f, acmeToken, nil))
			if !slices.ContainsFunc(l.Data, func(m jsonMap) bool { return m["id"] == c.id }) {
				t.Errorf("GET %s?%s does not list %s, whose time is exactly %s: %v", c.route, f, c.id, c.at, l.Data)
			}
		}
		at, err := time.Parse(time.RFC3339Nano, c.at)
		if err != nil {
			t.Fatal(err)
		}
		after := at.Add(time.Nanosecond).Format(time.RFC3339Nano)
		l := must[admin.List[jsonMap]](t, 200)(g.api("GET", c.route+"?since="+q(after)+"&until="+q(after), acmeToken, nil))
		if len(l.Data) != 0 {
			t.Errorf("GET %s with since=until=%s (1 ns after %s) lists %v", c.route, after, c.at, l.Data)
		}
	}
	// A bulk replay over exactly that instant matches that one event.
	job := must[admin.Replay](t, 202)(g.api("POST", "/replays", acmeToken, jsonMap{"since": evs[1].ReceivedAt, "until": evs[1].ReceivedAt}))
	testsupport.WaitFor(t, 10*time.Second, "the bulk replay", func() bool {
		job = must[admin.Replay](t, 200)(g.api("GET", "/replays/"+job.ID, acmeToken, nil))
		return job.State != "running"
	})
	if job.State != "completed" || job.Matched != 1 || job.Enqueued != 1 {
		t.Errorf("bulk replay since=until=%s: %+v; want completed, matched 1, enqueued 1", evs[1].ReceivedAt, job)
	}
}

// Bad query values are a 400 problem naming the parameter, never a 500
// or a list that ignores them.
func TestBadQueryValuesAreClearProblems(t *testing.T) {
	g := startContractGateway(t, "")
	for _, c := range []struct{ path, field string }{
		{"/events?limit=0", "limit"}, {"/events?limit=-1", "limit"}, {"/events?limit=abc", "limit"},
		{"/events?limit=1001", "limit"}, {"/events?limit=1.5", "limit"}, {"/events?limit=99999999999999999999", "limit"},
		{"/events?cursor=%21%21", "cursor"}, {"/events?cursor=" + encodeTestCursor("dlv_06h3fdnq7xajs8nk1jd8ve5hpm"), "cursor"},
		{"/events?since=yesterday", "since"}, {"/events?until=0001-01-01T00:00:00Z", "until"},
		{"/events?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "since"},
		{"/events?type=%5B", "type"}, {"/events?status=failed", "status"}, {"/events?limit=1&limit=2", "limit"},
		{"/deliveries?status=bogus", "status"}, {"/deliveries?state=failed", "state"}, {"/deliveries?type=t", "type"},
		{"/deliveries?cursor=" + encodeTestCursor("evt_06h3fdnq7xajs8nk1jd8ve5hpm"), "cursor"},
		{"/deliveries?since=2026-13-01T00:00:00Z", "since"},
		{"/endpoints?limit=0", "limit"}, {"/endpoints?cursor=zzz", "cursor"}, {"/endpoints?tenant=acme", "tenant"},
		{"/sources?limit=x", "limit"}, {"/sources?cursor=" + encodeTestCursor("endpoint:x"), "cursor"},
	} {
		for _, tok := range []string{opToken, acmeToken} {
			st, hdr, b := g.api("GET", c.path, tok, nil)
			p := contractProblem(t, "GET "+c.path, 400, st, hdr, b)
			if p.Field != c.field {
				t.Errorf("GET %s: problem names field %q, want %q: %s", c.path, p.Field, c.field, b)
			}
		}
	}
}
