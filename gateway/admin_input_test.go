package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/inbound"
	"hookgate/internal/testsupport"
	"hookgate/storage"
)

// The admin API's handling of its inputs (SPEC section 5). The promise: every bad input is a 400 or 422 problem naming the field, and
// what is accepted is stored as sent and then works.

// TestPatchNullIsNotSilentlyIgnored: a PATCH field sent as JSON
// null (none of the endpoint's fields is nullable in openapi.json) must
// either be refused naming the field, or reset the field to its default
// (JSON Merge Patch). It was answered 200 with the field left as it was:
// a client clearing an endpoint's event_types or sources filter with null
// was told it had, and the filter stayed.
func TestPatchNullIsNotSilentlyIgnored(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{})
	before := must[jsonMap](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "nul", "url": rcv.url("nul"), "sources": []string{"open"}, "event_types": []string{"invoice.*"},
		"headers": jsonMap{"X-Team": "billing"}, "timeout": "1s", "max_in_flight": 3, "rate_limit": 5,
		"retry": jsonMap{"max_attempts": 7},
	}))
	for _, field := range []string{"url", "sources", "event_types", "headers", "timeout", "max_in_flight", "rate_limit", "retry", "secret", "disabled"} {
		t.Run(field, func(t *testing.T) {
			st, hdr, body := g.api("PATCH", "/endpoints/nul", acmeToken, fmt.Sprintf(`{%q:null}`, field))
			switch st {
			case http.StatusBadRequest, http.StatusUnprocessableEntity:
				if p := decodeProblem(t, hdr, body); p.Field != field {
					t.Fatalf("problem names field %q, want %q: %s", p.Field, field, body)
				}
				return
			case http.StatusOK:
				var after jsonMap
				if err := json.Unmarshal(body, &after); err != nil {
					t.Fatal(err)
				}
				if reflect.DeepEqual(after[field], before[field]) {
					t.Fatalf(`PATCH {%q:null} answered 200 and left %s as it was (%v): null silently ignored`, field, field, after[field])
				}
			default:
				t.Fatalf("status %d: %s", st, body)
			}
		})
	}
	// Sources too: {"event_id": null} kept the stored expression.
	srcBefore := must[jsonMap](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{
		"id": "nulsrc", "verify": jsonMap{"scheme": "none"}, "event_id": "json:/id", "event_type": "json:/type",
	}))
	for _, field := range []string{"event_id", "event_type", "verify"} {
		t.Run("source "+field, func(t *testing.T) {
			st, hdr, body := g.api("PATCH", "/sources/nulsrc", acmeToken, fmt.Sprintf(`{%q:null}`, field))
			switch st {
			case http.StatusBadRequest, http.StatusUnprocessableEntity:
				if p := decodeProblem(t, hdr, body); p.Field != field {
					t.Fatalf("problem names field %q, want %q: %s", p.Field, field, body)
				}
			case http.StatusOK:
				var after jsonMap
				if err := json.Unmarshal(body, &after); err != nil {
					t.Fatal(err)
				}
				if reflect.DeepEqual(after[field], srcBefore[field]) {
					t.Fatalf(`PATCH {%q:null} answered 200 and left %s as it was (%v): null silently ignored`, field, field, after[field])
				}
			default:
				t.Fatalf("status %d: %s", st, body)
			}
		})
	}
}

// TestAdminBodiesWithInvalidUTF8AreRefused: a JSON body must be UTF-8
// (RFC 8259 section 8.1). encoding/json replaces every invalid byte with
// U+FFFD without a word, so the API answered 201 and stored something
// else than it was sent: an endpoint's static header went out as other
// bytes, and an hmac source's secret became another key, so every
// correctly signed webhook of the provider got 401.
func TestAdminBodiesWithInvalidUTF8AreRefused(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{})

	t.Run("endpoint header value", func(t *testing.T) {
		sent := "token-\xff\xfe"
		body := []byte(`{"id":"utf","url":"` + rcv.url("utf") + `","sources":["open"],"headers":{"X-Token":"` + sent + `"}}`)
		st, _, b := g.api("POST", "/endpoints", acmeToken, body)
		if st == http.StatusBadRequest || st == http.StatusUnprocessableEntity {
			return
		}
		if st != http.StatusCreated {
			t.Fatalf("status %d: %s", st, b)
		}
		g.post("open", []byte(`{"id":"utf-1","type":"t"}`), nil)
		testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() > 0 })
		if got := rcv.all()[0].header.Get("X-Token"); got != sent {
			t.Fatalf("accepted with X-Token %q (201), delivered with X-Token %q", sent, got)
		}
	})

	t.Run("hmac source secret", func(t *testing.T) {
		secret := "k3y-\xff\xfe-provider-secret"
		body := []byte(`{"id":"utfsrc","verify":{"scheme":"hmac","header":"X-Sig","secrets":["` + secret + `"]},"event_id":"json:/id"}`)
		st, _, b := g.api("POST", "/sources", acmeToken, body)
		if st == http.StatusBadRequest || st == http.StatusUnprocessableEntity {
			return
		}
		if st != http.StatusCreated {
			t.Fatalf("status %d: %s", st, b)
		}
		payload := []byte(`{"id":"s-1"}`)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(payload)
		st, _, b = g.post("utfsrc", payload, map[string]string{"X-Sig": hex.EncodeToString(mac.Sum(nil))})
		if st != http.StatusAccepted {
			t.Fatalf("the source was accepted (201) with its secret, but a webhook signed with that secret gets %d: %s", st, b)
		}
	})
}

// TestReplayEventRefusesQueryParameters: POST /events/{id}/replay takes
// its endpoints in the body. A client that put them in the query
// (?endpoints=a) got 202 and a replay to every subscribed endpoint, as if
// it had asked for that: the mistake the list routes refuse with 400
// once ("a misspelt filter listed everything").
func TestReplayEventRefusesQueryParameters(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: a, tenant: acme, url: %q, sources: [open]}
  - {id: b, tenant: acme, url: %q, sources: [open]}
`, rcv.url("a"), rcv.url("b"))})
	acc := must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"q-1","type":"t"}`), nil))
	id := acc["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 2 })

	st, hdr, body := g.api("POST", "/events/"+id+"/replay?endpoints=a", acmeToken, nil)
	if st == http.StatusBadRequest {
		if p := decodeProblem(t, hdr, body); p.Field != "endpoints" {
			t.Fatalf("problem names field %q, want endpoints: %s", p.Field, body)
		}
		return
	}
	var got admin.List[admin.Delivery]
	_ = json.Unmarshal(body, &got)
	var to []string
	for _, d := range got.Data {
		to = append(to, d.Endpoint)
	}
	t.Fatalf("POST /events/{id}/replay?endpoints=a: status %d, new deliveries to %v (the query was ignored)", st, to)
}

// TestHugeRetryIntervalNeverRetriesAtOnce: the admin API takes any
// retry.max_interval a Duration holds. With one past ~146 years (less with
// a smaller randomization), the jittered wait overflows int64 to a negative
// Duration about half the time: the failed delivery was made due again in
// 1734, so it was retried at once, with no backoff, and again, until
// max_attempts or a lucky draw, instead of failing as max_elapsed says (the
// next attempt would start long after it). The receiver fails every other
// event and max_in_flight is 1, so the circuit never opens.
func TestHugeRetryIntervalNeverRetriesAtOnce(t *testing.T) {
	var reqs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		reqs.Add(1)
		if bytes.Contains(b, []byte("fail")) {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	g := startGateway(t, gwOptions{})
	st, hdr, body := g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "huge", "url": srv.URL + "/huge", "sources": []string{"open"}, "max_in_flight": 1,
		"retry": jsonMap{"initial_interval": "2562047h", "max_interval": "2562047h", "randomization": 1, "max_elapsed": "1m", "max_attempts": 20},
	})
	if st == http.StatusUnprocessableEntity {
		if p := decodeProblem(t, hdr, body); p.Field == "" {
			t.Fatalf("problem names no field: %s", body)
		}
		return
	}
	if st != http.StatusCreated {
		t.Fatalf("status %d: %s", st, body)
	}
	const pairs = 12
	for i := range pairs {
		must[jsonMap](t, 202)(g.post("open", fmt.Appendf(nil, `{"id":"fail-%d","type":"t"}`, i), nil))
		must[jsonMap](t, 202)(g.post("open", fmt.Appendf(nil, `{"id":"ok-%d","type":"t"}`, i), nil))
	}
	var ds []storage.Delivery
	retried := func() []string {
		var out []string
		for _, d := range ds {
			if d.AttemptCount > 1 {
				out = append(out, fmt.Sprintf("%s: %d attempts, state %s, next attempt %s", d.ID, d.AttemptCount, d.State, d.NextAttemptAt.UTC().Format(time.RFC3339)))
			}
		}
		return out
	}
	testsupport.WaitFor(t, 30*time.Second, "every delivery to end, or one retried", func() bool {
		var err error
		ds, _, err = g.Store().ListDeliveries(t.Context(), storage.DeliveryFilter{Endpoint: "huge", Limit: 100})
		if err != nil || len(ds) != 2*pairs {
			return false
		}
		if len(retried()) > 0 {
			return true
		}
		for _, d := range ds {
			if !d.State.Terminal() {
				return false
			}
		}
		return true
	})
	if r := retried(); len(r) > 0 {
		t.Fatalf("max_elapsed is 1m and the interval 2562047h: a failed attempt must fail its delivery, but %d were retried at once (receiver got %d requests for %d events):\n%s",
			len(r), reqs.Load(), 2*pairs, strings.Join(r, "\n"))
	}
}

// TestRetryDeliveryRefusesABody: POST /deliveries/{id}/retry takes no body
// (openapi.json), but read none either: {"endpoint":"b"} (a client trying
// to send the delivery elsewhere) or any unknown field got 202, and the
// delivery went to its own endpoint. Every other POST refuses unknown
// fields with 400 naming them.
func TestRetryDeliveryRefusesABody(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: a, tenant: acme, url: %q, sources: [open]}
  - {id: b, tenant: acme, url: %q, sources: [sw]}
`, rcv.url("a"), rcv.url("b"))})
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"r-1","type":"t"}`), nil))
	testsupport.WaitFor(t, 10*time.Second, "the first delivery", func() bool { return rcv.count() == 1 })
	ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=a", acmeToken, nil))
	if len(ds.Data) != 1 {
		t.Fatalf("%d deliveries", len(ds.Data))
	}
	st, hdr, body := g.api("POST", "/deliveries/"+ds.Data[0].ID+"/retry", acmeToken, jsonMap{"endpoint": "b"})
	if st == http.StatusBadRequest {
		if p := decodeProblem(t, hdr, body); p.Field != "endpoint" {
			t.Fatalf("problem names field %q, want endpoint: %s", p.Field, body)
		}
		return
	}
	t.Fatalf(`POST /deliveries/{id}/retry with {"endpoint":"b"}: status %d, the body was ignored: %s`, st, body)
}

// A validation problem names the resource by its id, as a config error
// names the entry; an id of invalid syntax is not echoed.
func TestAdminProblemsNameTheResource(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, c := range []struct {
		method, path string
		body         jsonMap
		field, want  string
	}{
		{"POST", "/endpoints", jsonMap{"id": "billing", "url": "ftp://x.example/"}, "url", "endpoint billing: "},
		{"POST", "/endpoints", jsonMap{"id": "billing", "url": "https://x.example/", "sources": []string{"open", "nope"}}, "sources[1]", `endpoint billing: no source "nope" in`},
		{"POST", "/sources", jsonMap{"id": "gh", "verify": jsonMap{"scheme": "hmac-sha257"}}, "verify.scheme", "source gh: "},
		{"PATCH", "/sources/open", jsonMap{"event_id": "json:nope"}, "event_id", "source open: "},
		{"POST", "/endpoints", jsonMap{"id": "bad id!", "url": "https://x.example/"}, "id", "must be"},
	} {
		p := wantProblem(t, c.path, 422, c.field)(g.api(c.method, c.path, acmeToken, c.body))
		if !strings.HasPrefix(p.Detail, c.want) {
			t.Errorf("%s %s: detail %q, want it to start with %q", c.method, c.path, p.Detail, c.want)
		}
	}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "billing", "url": "http://receiver.test/x"}))
	p := wantProblem(t, "PATCH", 422, "max_in_flight")(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"max_in_flight": 0}))
	if !strings.HasPrefix(p.Detail, "endpoint billing: must be from 1") {
		t.Errorf("PATCH /endpoints/billing: detail %q", p.Detail)
	}
}

// TestPublishPayloadWithNullsIsDeliveredAsSent: the null check
// of admin bodies must not look into a publish's payload: an event's own
// JSON holds nulls (Stripe's "description": null, arrays of nulls), and it
// is delivered byte for byte.
func TestPublishPayloadWithNullsIsDeliveredAsSent(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: a, tenant: acme, url: %q, sources: [open]}
`, rcv.url("a"))})
	payload := `{"id":"n-1","type":"t","description":null,"items":[null,{"x":null}],"nested":{"deep":{"v":null}}}`
	must[jsonMap](t, 202)(g.api("POST", "/events", acmeToken, `{"source":"open","payload":`+payload+`}`))
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	rcv.mu.Lock()
	got := rcv.reqs[0].body
	rcv.mu.Unlock()
	if !bytes.Equal(got, []byte(payload)) {
		t.Fatalf("delivered %s, want %s", got, payload)
	}
}

// TestPublishPayloadKeyMatchedLikeTheDecoder: encoding/json
// matches "Payload" to the payload field (field names are matched without
// case), so a body the decoder takes as a publish with a payload must not
// then be refused for a null inside that payload.
func TestPublishPayloadKeyMatchedLikeTheDecoder(t *testing.T) {
	g := startGateway(t, gwOptions{})
	st, _, body := g.api("POST", "/events", acmeToken, `{"source":"open","Payload":{"id":"n-2","type":"t","description":null}}`)
	if st != 202 {
		t.Fatalf(`POST /events {"Payload":{…"description":null}}: %d %s; the decoder took "Payload" as the payload, whose nulls are the event's own`, st, body)
	}
}

// TestPostWithEmptyQueryStringIsAccepted: a client that
// always puts a "?" after the path, with nothing after it, sends no
// query parameter.
func TestPostWithEmptyQueryStringIsAccepted(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[jsonMap](t, 202)(g.api("POST", "/events?", acmeToken, `{"source":"open","payload":{"id":"q-0","type":"t"}}`))
}

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
	testsupport.WaitFor(t, 10*time.Second, "the first deliveries", func() bool { return rcv.count() == 2 })

	st, hdr, b := g.api("POST", "/events/"+evt+"/replay", acmeToken, `{"endpoints":[]}`)
	if st != 422 {
		l := must[admin.List[admin.Delivery]](t, st)(st, hdr, b)
		var eps []string
		for _, d := range l.Data {
			eps = append(eps, d.Endpoint)
		}
		t.Fatalf(`replay with "endpoints": []: %d with new deliveries to %v; want 422 naming endpoints, nothing enqueued`, st, eps)
	}
	wantProblem(t, "empty endpoints", 422, "endpoints")(st, hdr, b)
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, acmeToken, nil)).Data); n != 2 {
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
			t.Fatalf("try %d: 405 without Allow (Idempotent-Replayed=%q); want Allow: GET, HEAD", i+1, hdr.Get(inbound.HeaderReplayed))
		}
		if hdr.Get(inbound.HeaderReplayed) != "" {
			t.Fatalf("try %d: a stored answer was replayed for a request no handler ran", i+1)
		}
	}
}

// The admin listener takes a header block of up to 16 KiB, as the ingest
// listener does (README): a request with a 10 KB header (a long bearer
// token, proxies' headers) was a 431 there at 4 KiB.
func TestAdminHeaderBlockLimitIs16KiB(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[admin.List[admin.Event]](t, 200)(g.api("GET", "/events", opToken, nil, "X-Pad", strings.Repeat("a", 10000)))
	if st, _, b := g.api("GET", "/events", opToken, nil, "X-Pad", strings.Repeat("a", 17000)); st != 431 {
		t.Fatalf("a 17 KB header: %d %s, want 431", st, b)
	}
}

// TestAdminBodyThatIsJustNullIsRefused: a body that is the JSON literal
// null (what a client serialising a nil patch or request object sends) is
// no object of fields. encoding/json leaves the target as it was for it,
// and the null check names a null by its field, so a null with no field
// went through: PATCH answered 200 having changed nothing (as
// {"event_types":null} did once), and bumped updated_at. An
// empty body, by contrast, is 400 "a JSON body is required". (POST
// /replays is refused already, as "{}" is: no filter named.)
func TestAdminBodyThatIsJustNullIsRefused(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{})
	must[jsonMap](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "nb", "url": rcv.url("nb")}))
	must[jsonMap](t, 201)(g.api("POST", "/sources", acmeToken, jsonMap{"id": "nbsrc", "verify": jsonMap{"scheme": "none"}}))
	for _, r := range []struct{ method, path string }{
		{"PATCH", "/endpoints/nb"},
		{"PATCH", "/sources/nbsrc"},
		{"POST", "/replays"},
	} {
		for _, body := range []string{"null", " null\n"} {
			st, _, answer := g.api(r.method, r.path, acmeToken, body)
			if st != 400 && st != 422 {
				t.Errorf("%s %s with the body %q: %d %s; want 400 (the body is not an object)", r.method, r.path, body, st, answer)
			}
		}
	}
}
