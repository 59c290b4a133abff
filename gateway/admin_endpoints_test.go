package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"hookgate/storage"
)

func TestAdminEndpointsCRUD(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{})

	// POST with defaults: generated id and secret, the config's delivery settings.
	raw := must[jsonMap](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"url": rcv.url("one")}))
	for _, k := range []string{"id", "tenant", "url", "secret", "sources", "event_types", "headers", "timeout", "max_in_flight", "rate_limit", "retry", "disabled", "disabled_reason"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("endpoint lacks %q: %v", k, raw)
		}
	}
	ep := must[endpointView](t, 200)(g.api("GET", "/endpoints/"+raw["id"].(string), acmeToken, nil))
	r := ep.Retry
	if !strings.HasPrefix(ep.ID, "ep_") || ep.Tenant != "acme" || !validWhsec(ep.Secret, minEndpointSecret) || ep.Timeout != "2s" ||
		ep.MaxInFlight != 10 || ep.RateLimit != 0 || ep.Disabled || r.InitialInterval != "20ms" || r.MaxInterval != "100ms" ||
		r.Multiplier != 2 || r.MaxAttempts != 5 || r.MaxElapsed != "1m0s" {
		t.Fatalf("defaults: %+v", ep)
	}
	created, _ := time.Parse(time.RFC3339Nano, ep.CreatedAt)
	if created.IsZero() || !strings.HasSuffix(ep.CreatedAt, "Z") {
		t.Fatalf("created_at %q", ep.CreatedAt)
	}
	// An operator's endpoint without a tenant is in "default", like config.yaml.
	if d := must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "dflt", "url": rcv.url("d")})); d.Tenant != "default" {
		t.Fatalf("operator default tenant %q", d.Tenant)
	}

	// POST with everything.
	full := jsonMap{
		"id": "billing", "url": rcv.url("billing"), "secret": "whsec_" + strings.Repeat("QUJD", 8),
		"sources": []string{"open"}, "event_types": []string{"invoice.*"}, "headers": jsonMap{"X-Team": "billing"},
		"timeout": "1s", "max_in_flight": 3, "rate_limit": 50, "retry": jsonMap{"max_attempts": 7, "initial_interval": "50ms"},
	}
	ep = must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, full))
	if ep.ID != "billing" || ep.Secret != full["secret"] || ep.Timeout != "1s" || ep.MaxInFlight != 3 || ep.RateLimit != 50 ||
		ep.Retry.MaxAttempts != 7 || ep.Retry.InitialInterval != "50ms" || ep.Retry.MaxInterval != "100ms" || ep.Headers["X-Team"] != "billing" {
		t.Fatalf("full endpoint %+v", ep)
	}
	p := wantProblem(t, "duplicate id", 409, "id")(g.api("POST", "/endpoints", opToken, jsonMap{"id": "billing", "url": rcv.url("x")}))
	if strings.Contains(p.Detail, "acme") {
		t.Fatalf("conflict names the owner: %+v", p)
	}

	// It is live: ingest delivers to it with its headers.
	g.post("open", []byte(`{"id":"i1","type":"invoice.paid"}`), nil)
	waitFor(t, 10*time.Second, "delivery to the new endpoint", func() bool { return rcv.byPath()["/billing"] == 1 })
	for _, r := range rcv.all() {
		if r.path == "/billing" && r.header.Get("X-Team") != "billing" {
			t.Fatalf("static header missing: %v", r.header)
		}
	}

	// List and pages.
	l := must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil))
	if len(l.Data) != 2 || l.Data[0].ID != "billing" || l.NextCursor != "" {
		t.Fatalf("acme's endpoints: %+v", l)
	}
	p1 := must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints?limit=2", opToken, nil))
	p2 := must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints?limit=2&cursor="+url.QueryEscape(p1.NextCursor), opToken, nil))
	if len(p1.Data) != 2 || p1.NextCursor == "" || len(p2.Data) != 1 || p2.NextCursor != "" || p2.Data[0].ID <= p1.Data[1].ID {
		t.Fatalf("pages %+v / %+v", p1, p2)
	}
	wantProblem(t, "bad cursor", 400, "cursor")(g.api("GET", "/endpoints?cursor=!!", opToken, nil))

	// PATCH: present fields change, the rest stays.
	ep = must[endpointView](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"event_types": []string{"order.*"}, "retry": jsonMap{"max_attempts": 9}}))
	if ep.EventTypes[0] != "order.*" || ep.Retry.MaxAttempts != 9 || ep.Retry.InitialInterval != "50ms" || ep.URL != rcv.url("billing") || ep.Secret != full["secret"] {
		t.Fatalf("patched %+v", ep)
	}
	wantProblem(t, "patch id", 422, "id")(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"id": "other"}))
	wantProblem(t, "patch tenant", 422, "tenant")(g.api("PATCH", "/endpoints/billing", opToken, jsonMap{"tenant": "globex"}))
	wantProblem(t, "patch bad url", 422, "url")(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"url": "gopher://x"}))
	wantProblem(t, "patch unknown", 404, "")(g.api("PATCH", "/endpoints/nope", acmeToken, jsonMap{}))

	// Disable, then enable again: the dispatcher follows.
	ep = must[endpointView](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"disabled": true}))
	if !ep.Disabled || ep.DisabledReason == "" {
		t.Fatalf("disabled %+v", ep)
	}
	st, _, b := g.post("open", []byte(`{"id":"o1","type":"order.paid"}`), nil)
	o1 := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	// Deliveries are written with the event: none to the disabled endpoint.
	for _, d := range must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?event="+o1, acmeToken, nil)).Data {
		if d.Endpoint == "billing" {
			t.Fatalf("an event ingested while billing was disabled got a delivery to it: %+v", d)
		}
	}
	ep = must[endpointView](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"disabled": false}))
	if ep.Disabled || ep.DisabledReason != "" {
		t.Fatalf("enabled %+v", ep)
	}
	g.post("open", []byte(`{"id":"o2","type":"order.paid"}`), nil)
	waitFor(t, 10*time.Second, "delivery after enabling", func() bool { return rcv.byPath()["/billing"] == 2 })

	// DELETE: gone, and its pending deliveries are cancelled.
	must[jsonMap](t, 204)(g.api("DELETE", "/endpoints/billing", acmeToken, nil))
	wantProblem(t, "deleted", 404, "")(g.api("GET", "/endpoints/billing", acmeToken, nil))
	wantProblem(t, "delete again", 404, "")(g.api("DELETE", "/endpoints/billing", acmeToken, nil))
}

func TestAdminEndpointDeleteCancelsPending(t *testing.T) {
	rcv := newReceiver(t)
	rcv.failAt("slow", true)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: later, tenant: acme, url: %q, retry: {initial_interval: 1h, max_interval: 1h, max_elapsed: 2h}}
`, rcv.url("slow"))})
	ingestN(t, g, "p", 2)
	pending := func() []deliveryView {
		return must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?endpoint=later&status=pending", opToken, nil)).Data
	}
	waitFor(t, 10*time.Second, "two deliveries waiting an hour", func() bool {
		ds := pending()
		return len(ds) == 2 && ds[0].AttemptCount == 1 && ds[1].AttemptCount == 1
	})
	must[jsonMap](t, 204)(g.api("DELETE", "/endpoints/later", opToken, nil))
	ds := must[apiList[deliveryView]](t, 200)(g.api("GET", "/deliveries?endpoint=later", opToken, nil)).Data
	if len(ds) != 2 || ds[0].State != "cancelled" || ds[1].State != "cancelled" {
		t.Fatalf("after delete: %+v", ds)
	}
}

func TestAdminEndpointValidation(t *testing.T) {
	g := startGateway(t, gwOptions{})
	ok := "http://receiver.test/hook"
	cases := []struct {
		name   string
		body   any
		status int
		field  string
	}{
		{"no url", jsonMap{}, 422, "url"},
		{"empty url", jsonMap{"url": ""}, 422, "url"},
		{"ftp url", jsonMap{"url": "ftp://x.test/"}, 422, "url"},
		{"relative url", jsonMap{"url": "/hook"}, 422, "url"},
		{"not a url", jsonMap{"url": "http://%zz"}, 422, "url"},
		{"no host", jsonMap{"url": "http:///x"}, 422, "url"},
		{"user info", jsonMap{"url": "https://user:hunter2@x.test/"}, 422, "url"},
		{"port out of range", jsonMap{"url": "https://x.test:99999/"}, 422, "url"},
		{"space in query", jsonMap{"url": "http://x.test/hook?a 1"}, 422, "url"},
		{"bad id", jsonMap{"url": ok, "id": "bad id!"}, 422, "id"},
		{"long id", jsonMap{"url": ok, "id": strings.Repeat("a", 65)}, 422, "id"},
		{"dash id", jsonMap{"url": ok, "id": "-x"}, 422, "id"},
		{"bad glob", jsonMap{"url": ok, "event_types": []string{"a", "["}}, 422, "event_types[1]"},
		{"empty glob", jsonMap{"url": ok, "event_types": []string{""}}, 422, "event_types[0]"},
		{"reserved header", jsonMap{"url": ok, "headers": jsonMap{"Webhook-Id": "x"}}, 422, "headers.Webhook-Id"},
		{"hookgate header", jsonMap{"url": ok, "headers": jsonMap{"hookgate-source": "x"}}, 422, "headers.hookgate-source"},
		{"content-type header", jsonMap{"url": ok, "headers": jsonMap{"Content-Type": "x"}}, 422, "headers.Content-Type"},
		{"header injection", jsonMap{"url": ok, "headers": jsonMap{"X-A": "a\r\nX-B: b"}}, 422, "headers.X-A"},
		{"bad header name", jsonMap{"url": ok, "headers": jsonMap{"X A": "a"}}, 422, "headers"},
		{"bad timeout", jsonMap{"url": ok, "timeout": "soon"}, 422, "timeout"},
		{"zero timeout", jsonMap{"url": ok, "timeout": "0s"}, 422, "timeout"},
		{"timeout over an hour", jsonMap{"url": ok, "timeout": "2h"}, 422, "timeout"},
		{"number timeout", jsonMap{"url": ok, "timeout": 15}, 400, "timeout"},
		{"max_in_flight 0", jsonMap{"url": ok, "max_in_flight": 0}, 422, "max_in_flight"},
		{"max_in_flight unbounded", jsonMap{"url": ok, "max_in_flight": 1 << 30}, 422, "max_in_flight"},
		{"negative rate", jsonMap{"url": ok, "rate_limit": -1}, 422, "rate_limit"},
		{"multiplier", jsonMap{"url": ok, "retry": jsonMap{"multiplier": 0.5}}, 422, "retry.multiplier"},
		{"randomization", jsonMap{"url": ok, "retry": jsonMap{"randomization": 2}}, 422, "retry.randomization"},
		{"attempts", jsonMap{"url": ok, "retry": jsonMap{"max_attempts": 0}}, 422, "retry.max_attempts"},
		{"interval order", jsonMap{"url": ok, "retry": jsonMap{"initial_interval": "2h"}}, 422, "retry.initial_interval"},
		{"bad elapsed", jsonMap{"url": ok, "retry": jsonMap{"max_elapsed": "-1s"}}, 422, "retry.max_elapsed"},
		{"unknown retry field", jsonMap{"url": ok, "retry": jsonMap{"jitter": 1}}, 400, "jitter"},
		{"unknown source", jsonMap{"url": ok, "sources": []string{"open", "nope"}}, 422, "sources[1]"},
		{"short secret", jsonMap{"url": ok, "secret": "whsec_c2hvcnQ="}, 422, "secret"},
		{"not whsec", jsonMap{"url": ok, "secret": "topsecret-value-that-is-long-enough"}, 422, "secret"},
		{"unknown field", jsonMap{"url": ok, "colour": "red"}, 400, "colour"},
		{"wrong type", jsonMap{"url": 5}, 400, "url"},
		{"wrong nested type", jsonMap{"url": ok, "retry": jsonMap{"max_attempts": "3"}}, 400, "retry.max_attempts"},
		{"array body", []int{1}, 400, ""},
		{"bad json", `{"url":`, 400, ""},
		{"trailing json", `{"url":"http://x.test"} {}`, 400, ""},
		{"empty body", "", 400, ""},
	}
	for _, c := range cases {
		st, hdr, body := g.api("POST", "/endpoints", acmeToken, c.body)
		wantProblem(t, c.name, c.status, c.field)(st, hdr, body)
		for _, secret := range []string{"hunter2", "topsecret"} {
			if strings.Contains(string(body), secret) {
				t.Fatalf("%s: the problem echoes a secret: %s", c.name, body)
			}
		}
	}
	if l := must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints", opToken, nil)); len(l.Data) != 0 {
		t.Fatalf("refused requests created endpoints: %+v", l)
	}
	// An oversized body is refused on its Content-Length, before it is read.
	wantProblem(t, "oversized", 413, "")(rawRequest(t, g.AdminAddr(), "POST /api/v1/endpoints HTTP/1.1\r\nHost: x\r\n"+
		"Authorization: Bearer "+acmeToken+"\r\nContent-Type: application/json\r\nContent-Length: 3000000\r\n\r\n{"))
}

// rawRequest writes req on a new connection and reads the answer: for
// requests an HTTP client would not send, or whose body it would still be
// writing when the server answers and closes.
func rawRequest(t *testing.T, addr, req string) (int, http.Header, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func TestAdminRotateSecret(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf("endpoints:\n  - {id: r, tenant: acme, url: %q}\n", rcv.url("r"))})
	old := must[endpointView](t, 200)(g.api("GET", "/endpoints/r", acmeToken, nil)).Secret
	ep := must[endpointView](t, 200)(g.api("POST", "/endpoints/r/rotate-secret", acmeToken, nil))
	if ep.Secret == old || !validWhsec(ep.Secret, minEndpointSecret) {
		t.Fatalf("rotated secret %q (old %q)", ep.Secret, old)
	}
	stored, err := g.Store().GetEndpoint(t.Context(), "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Secrets) != 2 || stored.Secrets[1].Value != old || time.Until(stored.Secrets[1].ExpiresAt) < 23*time.Hour {
		t.Fatalf("stored secrets after rotation: %d, old expires %v", len(stored.Secrets), stored.Secrets[len(stored.Secrets)-1].ExpiresAt)
	}

	// During the grace period every delivery is signed with both: a
	// receiver with either secret verifies it.
	g.post("open", []byte(`{"id":"rot-1"}`), nil)
	waitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	got := rcv.all()[0]
	if n := len(strings.Fields(got.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures, want 2: %q", n, got.header.Get("webhook-signature"))
	}
	for _, s := range []string{old, ep.Secret} {
		verifySW(t, s, got.body, got.header)
	}

	// A chosen secret, and no grace: only it signs.
	chosen := "whsec_" + strings.Repeat("WllaWlla", 4)
	ep = must[endpointView](t, 200)(g.api("POST", "/endpoints/r/rotate-secret", acmeToken, jsonMap{"grace": "0s", "secret": chosen}))
	if ep.Secret != chosen {
		t.Fatalf("secret %q, want the chosen one", ep.Secret)
	}
	g.post("open", []byte(`{"id":"rot-2"}`), nil)
	waitFor(t, 10*time.Second, "the second delivery", func() bool { return rcv.count() == 2 })
	got = rcv.all()[1]
	if sig := got.header.Get("webhook-signature"); len(strings.Fields(sig)) != 1 {
		t.Fatalf("signatures after a rotation without grace: %q", sig)
	}
	verifySW(t, chosen, got.body, got.header)

	wantProblem(t, "bad grace", 422, "grace")(g.api("POST", "/endpoints/r/rotate-secret", acmeToken, jsonMap{"grace": "-1h"}))
	wantProblem(t, "bad secret", 422, "secret")(g.api("POST", "/endpoints/r/rotate-secret", acmeToken, jsonMap{"secret": "whsec_x"}))
	wantProblem(t, "unknown field", 400, "graze")(g.api("POST", "/endpoints/r/rotate-secret", acmeToken, jsonMap{"graze": "1h"}))
	wantProblem(t, "unknown endpoint", 404, "")(g.api("POST", "/endpoints/nope/rotate-secret", acmeToken, nil))
}

// verifySW checks a delivery with the official Standard Webhooks library.
func verifySW(t *testing.T, secret string, body []byte, h http.Header) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(body, h); err != nil {
		t.Fatalf("the delivery does not verify with a live secret: %v", err)
	}
}

// disablingStore disables endpoint "ep" in the store (as the dispatcher
// does after a 410) right after the next read of it: the moment between
// an admin change reading the endpoint and writing it back.
type disablingStore struct {
	storage.Store
	armed atomic.Bool
}

func (s *disablingStore) GetEndpoint(ctx context.Context, id string) (storage.Endpoint, error) {
	ep, err := s.Store.GetEndpoint(ctx, id)
	if err == nil && id == "ep" && s.armed.CompareAndSwap(true, false) {
		_, err = s.Store.UpdateEndpoint(ctx, id, func(ep *storage.Endpoint) error {
			ep.Disabled, ep.DisabledReason = true, "endpoint answered 410 Gone"
			return nil
		})
	}
	return ep, err
}

// An admin change does not undo a disable that happened while it ran: the
// change is applied to the endpoint as stored, not as read.
func TestAdminEndpointChangeKeepsConcurrentDisable(t *testing.T) {
	rcv := newReceiver(t)
	var ds *disablingStore
	g := startGateway(t, gwOptions{
		extra:     fmt.Sprintf("endpoints:\n  - {id: ep, tenant: acme, url: %q}\n", rcv.url("ep")),
		wrapStore: func(s storage.Store) storage.Store { ds = &disablingStore{Store: s}; return ds },
	})
	for _, c := range []struct {
		method, path string
		body         any // nil: no body (a nil jsonMap would be sent as null, a 400)
	}{
		{"PATCH", "/endpoints/ep", jsonMap{"timeout": "3s"}},
		{"POST", "/endpoints/ep/rotate-secret", nil},
	} {
		ds.armed.Store(true)
		ep := must[endpointView](t, 200)(g.api(c.method, c.path, acmeToken, c.body))
		if !ep.Disabled || ep.DisabledReason != "endpoint answered 410 Gone" {
			t.Fatalf("%s %s re-enabled an endpoint disabled meanwhile: disabled %v, reason %q", c.method, c.path, ep.Disabled, ep.DisabledReason)
		}
		// Re-enable for the next case.
		must[endpointView](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"disabled": false}))
	}
	if ep := must[endpointView](t, 200)(g.api("GET", "/endpoints/ep", acmeToken, nil)); ep.Timeout != "3s" {
		t.Fatalf("the change itself was lost: timeout %s", ep.Timeout)
	}
}

// POST /endpoints past maxEndpointsPerTenant (config.yaml's endpoints
// count too) is a 409 that says so, instead of an endpoint whose tenant's
// events could no longer be stored; a delete makes room again.
func TestAdminEndpointsPerTenantBound(t *testing.T) {
	defer func(n int) { maxEndpointsPerTenant = n }(maxEndpointsPerTenant)
	g := startGateway(t, gwOptions{})
	have := len(must[apiList[endpointView]](t, 200)(g.api("GET", "/endpoints?limit=1000", acmeToken, nil)).Data)
	maxEndpointsPerTenant = have + 1
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "bound-1", "url": "https://a.example.com/"}))
	p := wantProblem(t, "past the bound", 409, "tenant")(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "bound-2", "url": "https://a.example.com/"}))
	if !strings.HasSuffix(p.Type, "/too-many-endpoints") {
		t.Fatalf("problem %+v", p)
	}
	// Another tenant's bound is its own.
	must[endpointView](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "bound-g", "tenant": "globex", "url": "https://a.example.com/"}))
	if st, _, b := g.api("DELETE", "/endpoints/bound-1", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	must[endpointView](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "bound-2", "url": "https://a.example.com/"}))
}
