package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
	"hookgate/outbound"
)

// Outbound delivery as a subscriber sees it (SPEC section 4 and the
// delivery resources of section 5), end to end. Signatures are checked
// with subVerify, written from the Standard Webhooks specification, not
// from the gateway's code.

// dpDelivery is GET /deliveries/{id} decoded.
type dpDelivery struct {
	ID           string          `json:"id"`
	State        string          `json:"state"`
	AttemptCount int             `json:"attempt_count"`
	Endpoint     string          `json:"endpoint"`
	Key          string          `json:"idempotency_key"`
	Next         string          `json:"next_attempt_at"`
	Attempts     []admin.Attempt `json:"attempts"`
}

func (h *gw) dpDelivery(id string) dpDelivery {
	h.t.Helper()
	return must[dpDelivery](h.t, 200)(h.api("GET", "/deliveries/"+id, opToken, nil))
}

// dpIngest posts body to source open and returns the gateway event id.
func dpIngest(t *testing.T, g *gw, body string) string {
	t.Helper()
	st, _, ans := g.post("open", []byte(body), nil)
	if st != 202 {
		t.Fatalf("ingest %s: %d %s", body, st, ans)
	}
	var acc struct{ ID string }
	if err := json.Unmarshal(ans, &acc); err != nil {
		t.Fatal(err)
	}
	return acc.ID
}

// dpDeliveryOf returns the delivery of event ev to endpoint ep.
func dpDeliveryOf(t *testing.T, g *gw, ev, ep string) string {
	t.Helper()
	var id string
	testsupport.WaitFor(t, 10*time.Second, "the delivery of "+ev+" to "+ep, func() bool {
		l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ev+"&endpoint="+ep, opToken, nil))
		if len(l.Data) > 0 {
			id = l.Data[0].ID
			return true
		}
		return false
	})
	return id
}

// dpDeliveries lists the deliveries of an event, by endpoint.
func dpDeliveries(t *testing.T, g *gw, ev string) map[string]admin.Delivery {
	t.Helper()
	l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+ev, opToken, nil))
	m := map[string]admin.Delivery{}
	for _, d := range l.Data {
		m[d.Endpoint] = d
	}
	return m
}

// TestDeliverySameKeyForEveryEndpointEachWithItsOwnSecret: one event to three
// endpoints (two configured secrets, one generated) carries the same
// Idempotency-Key == webhook-id at each, signed with that endpoint's
// secret only; a replay to one named endpoint carries that key again.
func TestDeliverySameKeyForEveryEndpointEachWithItsOwnSecret(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: pa, tenant: acme, url: %q, secret: %q}
  - {id: pb, tenant: acme, url: %q, secret: %q}
  - {id: pc, tenant: acme, url: %q}
`, rcv.url("pa"), subSecretA, rcv.url("pb"), subSecretB, rcv.url("pc"))})
	genSecret := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/pc", opToken, nil)).Secret
	body := []byte(`{"type":"invoice.paid","n":1}`)
	st, _, ans := g.post("sw", body, signSW("msg_probe_key", time.Now(), body))
	if st != 202 {
		t.Fatalf("ingest %d %s", st, ans)
	}
	var acc struct{ ID string }
	_ = json.Unmarshal(ans, &acc)
	testsupport.WaitFor(t, 10*time.Second, "3 deliveries", func() bool {
		return len(rcv.at("pa")) == 1 && len(rcv.at("pb")) == 1 && len(rcv.at("pc")) == 1
	})
	secrets := map[string]string{"pa": subSecretA, "pb": subSecretB, "pc": genSecret}
	key := rcv.at("pa")[0].header.Get("Idempotency-Key")
	for ep, secret := range secrets {
		q := rcv.at(ep)[0]
		if q.header.Get("Idempotency-Key") != key || q.header.Get("webhook-id") != key {
			t.Errorf("%s: Idempotency-Key %q webhook-id %q, want both %q", ep, q.header.Get("Idempotency-Key"), q.header.Get("webhook-id"), key)
		}
		got := subVerify(t, q.header, q.body, subSecretA, subSecretB, genSecret)
		if len(got) != 1 || got[0] != secret {
			t.Errorf("%s: verified with %d secrets (%q), want only its own", ep, len(got), q.header.Get("webhook-signature"))
		}
	}
	must[jsonMap](t, 202)(g.api("POST", "/events/"+acc.ID+"/replay", opToken, map[string]any{"endpoints": []string{"pb"}}))
	testsupport.WaitFor(t, 10*time.Second, "the replay", func() bool { return len(rcv.at("pb")) == 2 })
	q := rcv.at("pb")[1]
	if q.header.Get("Idempotency-Key") != key || q.header.Get("webhook-id") != key || q.header.Get("hookgate-attempt") != "1" {
		t.Errorf("replay: Idempotency-Key %q webhook-id %q attempt %q, want %q and 1", q.header.Get("Idempotency-Key"), q.header.Get("webhook-id"), q.header.Get("hookgate-attempt"), key)
	}
	if len(rcv.at("pa")) != 1 || len(rcv.at("pc")) != 1 {
		t.Errorf("a replay to pb reached pa or pc: %d %d", len(rcv.at("pa")), len(rcv.at("pc")))
	}
}

// TestDeliveryRedirectsAreFailedAttemptsNotFollowed: 301, 302, 303, 307, 308
// are never followed (the Location is never asked), each is a failed
// attempt recorded with its status and body, retried until max_attempts,
// then the delivery is failed.
func TestDeliveryRedirectsAreFailedAttemptsNotFollowed(t *testing.T) {
	rcv := newReceiver(t)
	codes := []int{301, 302, 303, 307, 308}
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	for _, c := range codes {
		path := fmt.Sprintf("r%d", c)
		rcv.on(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", rcv.url("target"))
			w.WriteHeader(c)
			_, _ = io.WriteString(w, "moved away")
		})
		fmt.Fprintf(&eps, "  - {id: %s, tenant: acme, url: %q, sources: [open], retry: {max_attempts: 3}}\n", path, rcv.url(path))
	}
	g := startGateway(t, gwOptions{extra: eps.String()})
	ev := dpIngest(t, g, `{"id":"redir1","type":"t"}`)
	for _, c := range codes {
		ep := fmt.Sprintf("r%d", c)
		id := dpDeliveryOf(t, g, ev, ep)
		testsupport.WaitFor(t, 20*time.Second, ep+" failed", func() bool { return g.dpDelivery(id).State == "failed" })
		d := g.dpDelivery(id)
		if d.AttemptCount != 3 || len(d.Attempts) != 3 {
			t.Errorf("%s: attempt_count %d, %d attempts, want 3", ep, d.AttemptCount, len(d.Attempts))
		}
		for i, a := range d.Attempts {
			if a.N != i+1 || a.StatusCode != c || a.Response != "moved away" || a.Error == "" {
				t.Errorf("%s attempt %d: %+v", ep, i+1, a)
			}
		}
		for i, q := range rcv.at(ep) {
			if q.header.Get("hookgate-attempt") != strconv.Itoa(i+1) {
				t.Errorf("%s request %d: hookgate-attempt %q", ep, i+1, q.header.Get("hookgate-attempt"))
			}
		}
	}
	if n := len(rcv.at("target")); n != 0 {
		t.Errorf("a redirect was followed: the Location got %d requests", n)
	}
}

// TestDeliveryGoneDisablesAndFails: a 410 fails the delivery at once
// (one attempt, status 410), disables the endpoint with a reason, and no
// later event is delivered to it while another endpoint goes on.
func TestDeliveryGoneDisablesAndFails(t *testing.T) {
	rcv := newReceiver(t)
	rcv.on("gone", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusGone)
		_, _ = io.WriteString(w, "no such hook")
	})
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: gone, tenant: acme, url: %q, sources: [open]}
  - {id: fine, tenant: acme, url: %q, sources: [open]}
`, rcv.url("gone"), rcv.url("fine"))})
	ev := dpIngest(t, g, `{"id":"gone1","type":"t"}`)
	id := dpDeliveryOf(t, g, ev, "gone")
	testsupport.WaitFor(t, 10*time.Second, "the delivery failed", func() bool { return g.dpDelivery(id).State == "failed" })
	d := g.dpDelivery(id)
	if d.AttemptCount != 1 || len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 410 || d.Attempts[0].Response != "no such hook" || d.Next != "" {
		t.Errorf("delivery after 410: %+v", d)
	}
	// The endpoint is disabled just after the delivery's outcome is written.
	var ep admin.Endpoint
	testsupport.WaitFor(t, 10*time.Second, "the endpoint disabled", func() bool {
		ep = must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/gone", opToken, nil))
		return ep.Disabled
	})
	if ep.DisabledReason == "" {
		t.Errorf("endpoint after 410: disabled %v reason %q", ep.Disabled, ep.DisabledReason)
	}
	// Ingest reads the registry, reloaded after the disable is stored.
	testsupport.WaitFor(t, 10*time.Second, "the registry to see it disabled", func() bool {
		ep := g.reg.current().endpoint("acme", "gone")
		return ep != nil && ep.Disabled
	})
	ev2 := dpIngest(t, g, `{"id":"gone2","type":"t"}`)
	testsupport.WaitFor(t, 10*time.Second, "the second event at fine", func() bool { return len(rcv.at("fine")) == 2 })
	if ds := dpDeliveries(t, g, ev2); len(ds) != 1 || ds["fine"].ID == "" {
		t.Errorf("deliveries of an event after the 410: %+v", ds)
	}
	// A replay to every subscriber leaves the disabled one out; naming it is a conflict.
	must[jsonMap](t, 202)(g.api("POST", "/events/"+ev+"/replay", opToken, nil))
	wantProblem(t, "replay to a disabled endpoint", 409, "-")(g.api("POST", "/events/"+ev+"/replay", opToken, map[string]any{"endpoints": []string{"gone"}}))
	wantProblem(t, "retry to a disabled endpoint", 409, "-")(g.api("POST", "/deliveries/"+id+"/retry", opToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "the replay at fine", func() bool { return len(rcv.at("fine")) == 3 })
	if n := len(rcv.at("gone")); n != 1 {
		t.Errorf("the disabled endpoint got %d requests, want 1", n)
	}
	// Enabled again: a retry goes out as attempt 2.
	rcv.on("gone", nil)
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/gone", opToken, map[string]any{"disabled": false}))
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+id+"/retry", opToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "the retry", func() bool { return len(rcv.at("gone")) >= 2 })
	if a := rcv.at("gone")[1].header.Get("hookgate-attempt"); a != "2" {
		t.Errorf("retry after re-enabling: hookgate-attempt %q, want 2", a)
	}
}

// TestDeliveryNoAnswerIsStatusZero: a refused connection and a
// timeout are attempts with status_code 0 (present in the JSON), an error,
// no response, and a latency; a timeout's latency is at least the timeout.
func TestDeliveryNoAnswerIsStatusZero(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL + "/x"
	closed.Close()
	held := newHeldReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: refused, tenant: acme, url: %q, sources: [open], retry: {max_attempts: 2}}
  - {id: slow, tenant: acme, url: %q, sources: [open], timeout: 300ms, retry: {max_attempts: 2}}
`, closedURL, held.URL+"/slow")})
	ev := dpIngest(t, g, `{"id":"zero1","type":"t"}`)
	for _, ep := range []string{"refused", "slow"} {
		id := dpDeliveryOf(t, g, ev, ep)
		testsupport.WaitFor(t, 20*time.Second, ep+" failed", func() bool { return g.dpDelivery(id).State == "failed" })
		raw := must[jsonMap](t, 200)(g.api("GET", "/deliveries/"+id, opToken, nil))
		atts, _ := raw["attempts"].([]any)
		if len(atts) != 2 {
			t.Fatalf("%s: attempts %v", ep, raw["attempts"])
		}
		for i, a := range atts {
			m := a.(jsonMap)
			sc, has := m["status_code"]
			if !has || sc != float64(0) {
				t.Errorf("%s attempt %d: status_code %v (present %v), want 0", ep, i+1, sc, has)
			}
			if m["error"] == "" || m["response"] != "" {
				t.Errorf("%s attempt %d: error %q response %q", ep, i+1, m["error"], m["response"])
			}
			lat, _ := m["latency_ms"].(float64)
			if ep == "slow" && lat < 300 {
				t.Errorf("%s attempt %d: latency_ms %v below the 300ms timeout", ep, i+1, lat)
			}
			if ep == "slow" && !strings.Contains(fmt.Sprint(m["error"]), "timeout") {
				t.Errorf("%s attempt %d: error %q does not say timeout", ep, i+1, m["error"])
			}
		}
	}
}

// TestDeliveryResponseExcerptAndLatency: an attempt records the first
// KiB of the response, as it was, and the time the answer took.
func TestDeliveryResponseExcerptAndLatency(t *testing.T) {
	rcv := newReceiver(t)
	long := strings.Repeat("0123456789abcdef", 256) // 4 KiB of ASCII
	rcv.on("long", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		_, _ = io.WriteString(w, long)
	})
	rcv.on("slow", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond) // a slow receiver, not synchronisation
		w.WriteHeader(202)
		_, _ = io.WriteString(w, "ok")
	})
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: long, tenant: acme, url: %q, sources: [open]}
  - {id: slow, tenant: acme, url: %q, sources: [open]}
`, rcv.url("long"), rcv.url("slow"))})
	ev := dpIngest(t, g, `{"id":"exc1","type":"t"}`)
	for _, ep := range []string{"long", "slow"} {
		id := dpDeliveryOf(t, g, ev, ep)
		testsupport.WaitFor(t, 10*time.Second, ep+" succeeded", func() bool { return g.dpDelivery(id).State == "succeeded" })
		d := g.dpDelivery(id)
		if len(d.Attempts) != 1 {
			t.Fatalf("%s: %+v", ep, d)
		}
		a := d.Attempts[0]
		switch ep {
		case "long":
			if a.Response != long[:1024] || a.StatusCode != 200 || a.Error != "" {
				t.Errorf("long: status %d error %q response %d bytes, want the first 1024", a.StatusCode, a.Error, len(a.Response))
			}
		case "slow":
			if a.LatencyMS < 200 || a.StatusCode != 202 || a.Response != "ok" {
				t.Errorf("slow: %+v", a)
			}
		}
	}
}

// TestDeliveryFiltersSelectTheEndpoints: event_types globs (with "*"
// taking "/" too), plain types, classes, sources filters, tenants and
// disabled endpoints decide who gets an event, and nobody else does.
func TestDeliveryFiltersSelectTheEndpoints(t *testing.T) {
	rcv := newReceiver(t)
	eps := []struct{ id, filter string }{
		{"all", ""},
		{"inv", `event_types: ["invoice.*"]`},
		{"paid", `event_types: ["*.paid"]`},
		{"exact", `event_types: ["invoice.paid"]`},
		{"orders", `event_types: ["orders/*"]`},
		{"class", `event_types: ["invoice.[pv]*"]`},
		{"one", `event_types: ["invoice.?aid"]`},
		{"two", `event_types: ["nothing", "customer.*"]`},
		{"plus", `event_types: ["a+b"]`},
		{"onlysw", `sources: [sw]`},
		{"onlyopen", `sources: [open], event_types: ["*"]`},
		{"off", ``},
	}
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, e := range eps {
		f := e.filter
		if f != "" {
			f = ", " + f
		}
		fmt.Fprintf(&b, "  - {id: %s, tenant: acme, url: %q%s}\n", e.id, rcv.url(e.id), f)
	}
	fmt.Fprintf(&b, "  - {id: globex, tenant: globex, url: %q}\n", rcv.url("globex"))
	g := startGateway(t, gwOptions{extra: b.String()})
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/off", opToken, map[string]any{"disabled": true}))

	cases := []struct {
		typ  string
		want []string
	}{
		{"invoice.paid", []string{"all", "inv", "paid", "exact", "class", "one", "onlyopen"}},
		{"invoice.voided", []string{"all", "inv", "class", "onlyopen"}},
		{"invoice.créé", []string{"all", "inv", "onlyopen"}},
		{"invoicexpaid", []string{"all", "onlyopen"}},
		{"orders/create", []string{"all", "orders", "onlyopen"}},
		{"orders/line/create", []string{"all", "orders", "onlyopen"}},
		{"customer.created", []string{"all", "two", "onlyopen"}},
		{"charge.paid", []string{"all", "paid", "onlyopen"}},
		{"Invoice.Paid", []string{"all", "onlyopen"}},
		{"a+b", []string{"all", "plus", "onlyopen"}},
		{"aab", []string{"all", "onlyopen"}},
		{"", []string{"all", "onlyopen"}},
	}
	for i, c := range cases {
		body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("flt%d", i), "type": c.typ})
		ev := dpIngest(t, g, string(body))
		got := dpDeliveries(t, g, ev)
		var names []string
		for ep := range got {
			names = append(names, ep)
		}
		want := map[string]bool{}
		for _, w := range c.want {
			want[w] = true
			if _, ok := got[w]; !ok {
				t.Errorf("type %q: no delivery to %s (got %v)", c.typ, w, names)
			}
		}
		for ep := range got {
			if !want[ep] {
				t.Errorf("type %q: a delivery to %s, which does not subscribe", c.typ, ep)
			}
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "every delivery", func() bool { return len(rcv.at("all")) == len(cases) })
	for _, ep := range []string{"off", "globex", "onlysw"} {
		if n := len(rcv.at(ep)); n != 0 {
			t.Errorf("%s got %d requests, want none", ep, n)
		}
	}
}

// TestDeliveryManualRetryIsSentNowWhileCircuitOpen: SPEC section 5
// says POST /deliveries/{id}/retry "deliver[s] again now". An operator
// whose receiver failed five times in a row (the delivery is failed after
// max_attempts, and the endpoint's circuit is open) fixes the receiver
// and retries the delivery: the request goes out at once, not after the
// circuit's cool-down (5s after the fifth failure, doubling up to 5
// minutes after failed probes), as it did before RetryNow closed the
// circuit.
func TestDeliveryManualRetryIsSentNowWhileCircuitOpen(t *testing.T) {
	rcv := newReceiver(t)
	var mu sync.Mutex
	failing := true
	rcv.on("flaky", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		f := failing
		mu.Unlock()
		if f {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(200)
	})
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: flaky, tenant: acme, url: %q, sources: [open], retry: {initial_interval: 10ms, max_interval: 20ms, max_attempts: 5}}
`, rcv.url("flaky"))})
	ev := dpIngest(t, g, `{"id":"circ1","type":"t"}`)
	id := dpDeliveryOf(t, g, ev, "flaky")
	testsupport.WaitFor(t, 10*time.Second, "the delivery failed", func() bool { return g.dpDelivery(id).State == "failed" })
	mu.Lock()
	failing = false // the operator fixed the receiver
	mu.Unlock()
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+id+"/retry", opToken, nil))
	asked := time.Now()
	testsupport.WaitFor(t, 10*time.Second, "the retry went out", func() bool { return len(rcv.at("flaky")) >= 6 })
	// The circuit opened at the fifth failure; held by it, the retry would
	// go out no earlier than the cool-down after that.
	reqs := rcv.at("flaky")
	if cooled := reqs[4].at.Add(outbound.DefaultCircuitCooldown); !reqs[5].at.Before(cooled) {
		t.Errorf("POST /deliveries/{id}/retry (\"deliver again now\") went out %v after it was asked for: held by the endpoint's open circuit", reqs[5].at.Sub(asked).Round(time.Millisecond))
	}
}

// TestDeliveryResponseExcerptOfANonUTF8Answer: a receiver answers in
// Latin-1 (an old Java or IIS error page). The attempt's response is the
// first 1 KiB of that answer, its invalid bytes shown as U+FFFD, so as
// UTF-8 it is longer than 1 KiB. GET /deliveries/{id} used to cut it again
// at byte 1024, in the middle of a character: it covered only about 600
// bytes of the answer and ended in broken UTF-8.
func TestDeliveryResponseExcerptOfANonUTF8Answer(t *testing.T) {
	rcv := newReceiver(t)
	answer := strings.Repeat("ab\xfc", 700) // 2100 bytes, every third one not UTF-8
	rcv.on("latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=iso-8859-1")
		w.WriteHeader(500)
		_, _ = io.WriteString(w, answer)
	})
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: latin1, tenant: acme, url: %q, sources: [open], retry: {max_attempts: 1}}
`, rcv.url("latin1"))})
	ev := dpIngest(t, g, `{"id":"latin1","type":"t"}`)
	id := dpDeliveryOf(t, g, ev, "latin1")
	testsupport.WaitFor(t, 10*time.Second, "the delivery failed", func() bool { return g.dpDelivery(id).State == "failed" })
	d := g.dpDelivery(id)
	if len(d.Attempts) != 1 {
		t.Fatalf("%+v", d)
	}
	got := d.Attempts[0].Response
	want := strings.ToValidUTF8(answer[:1024], "\uFFFD")
	if got != want {
		covered := strings.Count(got, "ab")
		t.Errorf("response excerpt is %d bytes covering about %d bytes of the answer and ends %q (the answer there is \"ab\\xfc\": one U+FFFD, not two); want the first 1 KiB of the answer, %d bytes as UTF-8",
			len(got), 3*covered, got[max(0, len(got)-8):], len(want))
	}
}

// TestDeliveryWithoutContentType: a provider that sends no
// Content-Type (or an empty body) gets its event delivered without one
// made up, the body as sent, signed.
func TestDeliveryWithoutContentType(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: noct, tenant: acme, url: %q, secret: %q, sources: [open], headers: {X-Static: "s v"}}
`, rcv.url("noct"), subSecretA)})
	for i, body := range []string{`{"id":"noct1","type":"t"}`, ``} {
		req, _ := http.NewRequest("POST", "http://"+g.PublicAddr()+"/ingest/open", strings.NewReader(body))
		req.Header.Del("Content-Type")
		if st, _, ans := do(t, req); st != 202 {
			t.Fatalf("ingest %d: %d %s", i, st, ans)
		}
	}
	testsupport.WaitFor(t, 10*time.Second, "2 deliveries", func() bool { return len(rcv.at("noct")) == 2 })
	for _, q := range rcv.at("noct") {
		if ct, ok := q.header["Content-Type"]; ok {
			t.Errorf("body %q: Content-Type %q made up", q.body, ct)
		}
		if q.header.Get("X-Static") != "s v" {
			t.Errorf("static header %q", q.header.Get("X-Static"))
		}
		if len(subVerify(t, q.header, q.body, subSecretA)) != 1 {
			t.Errorf("body %q: signature %q", q.body, q.header.Get("webhook-signature"))
		}
	}
}

// TestDeliveryDisableMidRetryAndFreshBudget: a delivery retrying
// against a failing receiver stops getting requests once its endpoint is
// disabled (PATCH), resumes with the next attempt number when enabled
// again, and a manual retry of the failed delivery gets a fresh
// max_attempts budget, numbering on.
func TestDeliveryDisableMidRetryAndFreshBudget(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	held := make(chan struct{})
	var once sync.Once
	rcv.on("flap", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("hookgate-attempt") == "1" {
			once.Do(func() { close(held) })
		}
		w.WriteHeader(500)
	})
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: flap, tenant: acme, url: %q, sources: [open], retry: {initial_interval: 300ms, max_interval: 300ms, randomization: 0, max_attempts: 2}}
`, rcv.url("flap"))})
	ev := dpIngest(t, g, `{"id":"flap1","type":"t"}`)
	id := dpDeliveryOf(t, g, ev, "flap")
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first attempt never came")
	}
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/flap", opToken, map[string]any{"disabled": true}))
	testsupport.WaitFor(t, 5*time.Second, "attempt 1 recorded", func() bool { return g.dpDelivery(id).AttemptCount == 1 })
	// Past the 300ms backoff: nothing may go out while disabled.
	testsupport.WaitFor(t, 5*time.Second, "past the backoff", func() bool {
		d := g.dpDelivery(id)
		next, _ := time.Parse(time.RFC3339Nano, d.Next)
		return time.Now().After(next.Add(500 * time.Millisecond))
	})
	if n := len(rcv.at("flap")); n != 1 {
		t.Fatalf("a disabled endpoint got %d requests, want 1", n)
	}
	if d := g.dpDelivery(id); d.State != "pending" {
		t.Errorf("delivery of a disabled endpoint: state %s, want pending", d.State)
	}
	must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/flap", opToken, map[string]any{"disabled": false}))
	testsupport.WaitFor(t, 10*time.Second, "failed after attempt 2", func() bool { return g.dpDelivery(id).State == "failed" })
	must[jsonMap](t, 202)(g.api("POST", "/deliveries/"+id+"/retry", opToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "failed after attempt 4", func() bool {
		d := g.dpDelivery(id)
		return d.State == "failed" && d.AttemptCount == 4
	})
	reqs := rcv.at("flap")
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	d := g.dpDelivery(id)
	for i, q := range reqs {
		if q.header.Get("hookgate-attempt") != strconv.Itoa(i+1) || d.Attempts[i].N != i+1 || d.Attempts[i].StatusCode != 500 {
			t.Errorf("request %d: hookgate-attempt %q, attempt %+v", i+1, q.header.Get("hookgate-attempt"), d.Attempts[i])
		}
	}
}

// A subscriber answering 429 with Retry-After: 3 asks the client to send
// it nothing for 3 seconds (RFC 6585 §4, RFC 9110 §10.2.3): not only the
// retry of that delivery waits, every other delivery to the endpoint does,
// a new event's hand-off included.
func TestRetryAfterHoldsTheEndpointNotOnlyTheDelivery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var at []time.Time
	var until time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, time.Now())
		if len(at) == 1 {
			until = time.Now().Add(3 * time.Second)
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(at)
	}
	g := startGateway(t, gwOptions{extra: oneEndpoint(srv.URL, "initial_interval: 20ms, max_interval: 10s, randomization: 0, max_attempts: 5, max_elapsed: 1m") +
		"    max_in_flight: 1\n"})
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"ra-first","type":"t.x"}`), nil))
	testsupport.WaitFor(t, 5*time.Second, "the 429", func() bool { return count() >= 1 })
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"ra-second","type":"t.x"}`), nil))
	testsupport.WaitFor(t, 10*time.Second, "both delivered", func() bool { return count() >= 3 })
	mu.Lock()
	defer mu.Unlock()
	for i, q := range at[1:] {
		// The hold is taken at the end of the attempt, a little after the
		// receiver's clock read until.
		if q.Before(until.Add(-200 * time.Millisecond)) {
			t.Errorf("request %d reached the endpoint %v after its 429 with Retry-After: 3",
				i+2, q.Sub(at[0]).Round(time.Millisecond))
		}
	}
}

// oneEndpoint is the config of endpoint e1 of tenant acme on source open,
// sending to url with the given retry settings (YAML flow mapping items).
func oneEndpoint(url, retry string) string {
	return "endpoints:\n  - id: e1\n    tenant: acme\n    url: " + url + "\n    sources: [open]\n    secret: " + subSecretA +
		"\n    retry: {" + retry + "}\n"
}

// SPEC section 5: POST /deliveries/{id}/retry "deliver again now". An
// operator whose receiver answered 503 with Retry-After during a
// maintenance window, and who retries the delivery once it is back, gets
// 202 with next_attempt_at now. Since the Retry-After hold of the whole
// endpoint, nothing was sent until the hold ran out (up to the endpoint's
// max_interval, 1h by default), and every other delivery of the endpoint
// waited with it: only a disable and enable, or a URL change, ended it.
func TestManualRetryWhileRetryAfterHoldIsSentNow(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	g := startGateway(t, gwOptions{extra: oneEndpoint(srv.URL, "initial_interval: 20ms, max_interval: 1m, randomization: 0, max_attempts: 5, max_elapsed: 1h")})
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"held-retry","type":"t.x"}`), nil))
	var id string
	testsupport.WaitFor(t, 5*time.Second, "the 503 recorded", func() bool {
		l := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=e1", acmeToken, nil))
		if len(l.Data) == 1 && l.Data[0].AttemptCount == 1 && l.Data[0].State == "pending" {
			id = l.Data[0].ID
			return true
		}
		return false
	})
	// The receiver is back; the operator retries the delivery.
	must[admin.Delivery](t, 202)(g.api("POST", "/deliveries/"+id+"/retry", acmeToken, nil))
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() < 2 {
		if time.Now().After(deadline) {
			d := must[admin.Delivery](t, 200)(g.api("GET", "/deliveries/"+id, acmeToken, nil))
			t.Fatalf("5s after POST /deliveries/%s/retry (202): the receiver got %d request(s); delivery %s, attempts %d, next_attempt_at %s; want the retry sent now",
				id, n.Load(), d.State, d.AttemptCount, d.NextAttemptAt)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdReceiver answers its first request 429 with Retry-After: ra, and
// every later one 200; n counts requests.
func holdReceiver(t *testing.T, ra string) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", ra)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// Coverage: the hold is capped at the endpoint's max_interval, so a
// receiver asking for an hour (or a far HTTP date) does not stop the
// endpoint past it; and moving the endpoint to another URL ends the hold
// of the old one at once.
func TestRetryAfterHoldCappedAndEndedByURLChange(t *testing.T) {
	t.Run("capped", func(t *testing.T) {
		srv, n := holdReceiver(t, "Sun, 06 Nov 2994 08:49:37 GMT")
		g := startGateway(t, gwOptions{extra: oneEndpoint(srv.URL, "initial_interval: 20ms, max_interval: 300ms, randomization: 0, max_attempts: 5, max_elapsed: 1h")})
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"cap-1","type":"t.x"}`), nil))
		testsupport.WaitFor(t, 5*time.Second, "the 429", func() bool { return n.Load() >= 1 })
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"cap-2","type":"t.x"}`), nil))
		testsupport.WaitFor(t, 5*time.Second, "both delivered past a capped hold", func() bool { return n.Load() >= 3 })
	})
	t.Run("url change", func(t *testing.T) {
		old, n := holdReceiver(t, "3600")
		moved, m := holdReceiver(t, "0") // its first answer, 429 with Retry-After: 0, holds nothing
		g := startGateway(t, gwOptions{extra: `endpoints: []`})
		must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "mv", "url": old.URL, "sources": []string{"open"},
			"retry": jsonMap{"initial_interval": "20ms", "max_interval": "1h", "randomization": 0, "max_attempts": 5, "max_elapsed": "2h"}}))
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"mv-1","type":"t.x"}`), nil))
		testsupport.WaitFor(t, 5*time.Second, "the 429", func() bool { return n.Load() >= 1 })
		must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/mv", acmeToken, jsonMap{"url": moved.URL}))
		must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"mv-2","type":"t.x"}`), nil))
		testsupport.WaitFor(t, 5*time.Second, "a delivery to the new URL", func() bool { return m.Load() >= 1 })
	})
}
