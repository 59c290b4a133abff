package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/gateway/config"
	"hookgate/internal/testsupport"
	"hookgate/storage"
	"hookgate/storage/badger"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
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
	ep := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/"+raw["id"].(string), acmeToken, nil))
	r := ep.Retry
	if !strings.HasPrefix(ep.ID, "ep_") || ep.Tenant != "acme" || !config.ValidWhsec(ep.Secret, config.MinEndpointSecret) || ep.Timeout != "2s" ||
		ep.MaxInFlight != 10 || ep.RateLimit != 0 || ep.Disabled || r.InitialInterval != "20ms" || r.MaxInterval != "100ms" ||
		r.Multiplier != 2 || r.MaxAttempts != 5 || r.MaxElapsed != "1m0s" {
		t.Fatalf("defaults: %+v", ep)
	}
	created, _ := time.Parse(time.RFC3339Nano, ep.CreatedAt)
	if created.IsZero() || !strings.HasSuffix(ep.CreatedAt, "Z") {
		t.Fatalf("created_at %q", ep.CreatedAt)
	}
	// An operator's endpoint without a tenant is in "default", like config.yaml.
	if d := must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "dflt", "url": rcv.url("d")})); d.Tenant != "default" {
		t.Fatalf("operator default tenant %q", d.Tenant)
	}

	// POST with everything.
	full := jsonMap{
		"id": "billing", "url": rcv.url("billing"), "secret": "whsec_" + strings.Repeat("QUJD", 8),
		"sources": []string{"open"}, "event_types": []string{"invoice.*"}, "headers": jsonMap{"X-Team": "billing"},
		"timeout": "1s", "max_in_flight": 3, "rate_limit": 50, "retry": jsonMap{"max_attempts": 7, "initial_interval": "50ms"},
	}
	ep = must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, full))
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
	testsupport.WaitFor(t, 10*time.Second, "delivery to the new endpoint", func() bool { return rcv.byPath()["/billing"] == 1 })
	for _, r := range rcv.all() {
		if r.path == "/billing" && r.header.Get("X-Team") != "billing" {
			t.Fatalf("static header missing: %v", r.header)
		}
	}

	// List and pages.
	l := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", acmeToken, nil))
	if len(l.Data) != 2 || l.Data[0].ID != "billing" || l.NextCursor != "" {
		t.Fatalf("acme's endpoints: %+v", l)
	}
	p1 := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints?limit=2", opToken, nil))
	p2 := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints?limit=2&cursor="+url.QueryEscape(p1.NextCursor), opToken, nil))
	if len(p1.Data) != 2 || p1.NextCursor == "" || len(p2.Data) != 1 || p2.NextCursor != "" || p2.Data[0].ID <= p1.Data[1].ID {
		t.Fatalf("pages %+v / %+v", p1, p2)
	}
	wantProblem(t, "bad cursor", 400, "cursor")(g.api("GET", "/endpoints?cursor=!!", opToken, nil))

	// PATCH: present fields change, the rest stays.
	ep = must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"event_types": []string{"order.*"}, "retry": jsonMap{"max_attempts": 9}}))
	if ep.EventTypes[0] != "order.*" || ep.Retry.MaxAttempts != 9 || ep.Retry.InitialInterval != "50ms" || ep.URL != rcv.url("billing") || ep.Secret != full["secret"] {
		t.Fatalf("patched %+v", ep)
	}
	wantProblem(t, "patch id", 422, "id")(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"id": "other"}))
	wantProblem(t, "patch tenant", 422, "tenant")(g.api("PATCH", "/endpoints/billing", opToken, jsonMap{"tenant": "globex"}))
	wantProblem(t, "patch bad url", 422, "url")(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"url": "gopher://x"}))
	wantProblem(t, "patch unknown", 404, "")(g.api("PATCH", "/endpoints/nope", acmeToken, jsonMap{}))

	// Disable, then enable again: the dispatcher follows.
	ep = must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"disabled": true}))
	if !ep.Disabled || ep.DisabledReason == "" {
		t.Fatalf("disabled %+v", ep)
	}
	st, _, b := g.post("open", []byte(`{"id":"o1","type":"order.paid"}`), nil)
	o1 := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	// Deliveries are written with the event: none to the disabled endpoint.
	for _, d := range must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+o1, acmeToken, nil)).Data {
		if d.Endpoint == "billing" {
			t.Fatalf("an event ingested while billing was disabled got a delivery to it: %+v", d)
		}
	}
	ep = must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/billing", acmeToken, jsonMap{"disabled": false}))
	if ep.Disabled || ep.DisabledReason != "" {
		t.Fatalf("enabled %+v", ep)
	}
	g.post("open", []byte(`{"id":"o2","type":"order.paid"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "delivery after enabling", func() bool { return rcv.byPath()["/billing"] == 2 })

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
	pending := func() []admin.Delivery {
		return must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=later&status=pending", opToken, nil)).Data
	}
	testsupport.WaitFor(t, 10*time.Second, "two deliveries waiting an hour", func() bool {
		ds := pending()
		return len(ds) == 2 && ds[0].AttemptCount == 1 && ds[1].AttemptCount == 1
	})
	must[jsonMap](t, 204)(g.api("DELETE", "/endpoints/later", opToken, nil))
	ds := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?endpoint=later", opToken, nil)).Data
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
	if l := must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints", opToken, nil)); len(l.Data) != 0 {
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
	old := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/r", acmeToken, nil)).Secret
	ep := must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/r/rotate-secret", acmeToken, nil))
	if ep.Secret == old || !config.ValidWhsec(ep.Secret, config.MinEndpointSecret) {
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
	testsupport.WaitFor(t, 10*time.Second, "the delivery", func() bool { return rcv.count() == 1 })
	got := rcv.all()[0]
	if n := len(strings.Fields(got.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("%d signatures, want 2: %q", n, got.header.Get("webhook-signature"))
	}
	for _, s := range []string{old, ep.Secret} {
		verifySW(t, s, got.body, got.header)
	}

	// A chosen secret, and no grace: only it signs.
	chosen := "whsec_" + strings.Repeat("WllaWlla", 4)
	ep = must[admin.Endpoint](t, 200)(g.api("POST", "/endpoints/r/rotate-secret", acmeToken, jsonMap{"grace": "0s", "secret": chosen}))
	if ep.Secret != chosen {
		t.Fatalf("secret %q, want the chosen one", ep.Secret)
	}
	g.post("open", []byte(`{"id":"rot-2"}`), nil)
	testsupport.WaitFor(t, 10*time.Second, "the second delivery", func() bool { return rcv.count() == 2 })
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
		ep := must[admin.Endpoint](t, 200)(g.api(c.method, c.path, acmeToken, c.body))
		if !ep.Disabled || ep.DisabledReason != "endpoint answered 410 Gone" {
			t.Fatalf("%s %s re-enabled an endpoint disabled meanwhile: disabled %v, reason %q", c.method, c.path, ep.Disabled, ep.DisabledReason)
		}
		// Re-enable for the next case.
		must[admin.Endpoint](t, 200)(g.api("PATCH", "/endpoints/ep", acmeToken, jsonMap{"disabled": false}))
	}
	if ep := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/ep", acmeToken, nil)); ep.Timeout != "3s" {
		t.Fatalf("the change itself was lost: timeout %s", ep.Timeout)
	}
}

// POST /endpoints past maxEndpointsPerTenant (config.yaml's endpoints
// count too) is a 409 that says so, instead of an endpoint whose tenant's
// events could no longer be stored; a delete makes room again.
func TestAdminEndpointsPerTenantBound(t *testing.T) {
	defer func(n int) { config.MaxEndpointsPerTenant = n }(config.MaxEndpointsPerTenant)
	g := startGateway(t, gwOptions{})
	have := len(must[admin.List[admin.Endpoint]](t, 200)(g.api("GET", "/endpoints?limit=1000", acmeToken, nil)).Data)
	config.MaxEndpointsPerTenant = have + 1
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "bound-1", "url": "https://a.example.com/"}))
	p := wantProblem(t, "past the bound", 409, "tenant")(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "bound-2", "url": "https://a.example.com/"}))
	if !strings.HasSuffix(p.Type, "/too-many-endpoints") {
		t.Fatalf("problem %+v", p)
	}
	// Another tenant's bound is its own.
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken, jsonMap{"id": "bound-g", "tenant": "globex", "url": "https://a.example.com/"}))
	if st, _, b := g.api("DELETE", "/endpoints/bound-1", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "bound-2", "url": "https://a.example.com/"}))
}

// An endpoint's event_types, URL and static headers are bounded, in the
// admin API and in config.yaml alike: every event of a tenant is matched
// against the event_types of each of its endpoints, and every delivery
// carries the URL and headers, on a gateway the tenants share. Before,
// one tenant token could store 60,000 globs (each ingest of its events
// then cost ~0.3 s of CPU), a 200 KB URL or a 200 KB header. At the bound
// each is taken; past it, a 422 (or a config error) names the field.
func TestEndpointSettingsAreBounded(t *testing.T) {
	globs := func(n, size int) []string {
		out := make([]string, n)
		for i := range out {
			g := fmt.Sprintf("t%d.*", i)
			out[i] = g + strings.Repeat("x", size-len(g))
		}
		return out
	}
	headers := func(n, valueSize int) map[string]string {
		h := map[string]string{}
		for i := range n {
			h[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", valueSize)
		}
		return h
	}
	longURL := func(n int) string {
		u := "http://receiver.test/"
		return u + strings.Repeat("p", n-len(u))
	}
	for _, c := range []struct {
		name  string
		body  jsonMap
		field string // "" = accepted
	}{
		{"256 globs of 128 bytes", jsonMap{"event_types": globs(256, 128)}, ""},
		{"257 globs", jsonMap{"event_types": globs(257, 8)}, "event_types"},
		{"a glob of 129 bytes", jsonMap{"event_types": append(globs(3, 8), globs(1, 129)...)}, "event_types[3]"},
		{"a URL of 4096 bytes", jsonMap{"url": longURL(4096)}, ""},
		{"a URL of 4097 bytes", jsonMap{"url": longURL(4097)}, "url"},
		{"64 headers, just under 8 KiB in all", jsonMap{"headers": headers(64, 120)}, ""},
		{"65 headers", jsonMap{"headers": headers(65, 1)}, "headers"},
		{"one header of 8 KiB", jsonMap{"headers": headers(1, 8<<10)}, "headers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startGateway(t, gwOptions{})
			body := jsonMap{"url": "http://receiver.test/x"}
			for k, v := range c.body {
				body[k] = v
			}
			st, hdr, b := g.api("POST", "/endpoints", acmeToken, body)
			if c.field == "" {
				if st != 201 {
					t.Fatalf("POST /endpoints: %d %s, want 201 at the bound", st, b)
				}
				return
			}
			if p := decodeProblem(t, hdr, b); st != 422 || p.Field != c.field {
				t.Fatalf("POST /endpoints: %d, field %q (%s); want 422 naming %s", st, p.Field, b, c.field)
			}
		})
	}
	// config.yaml: the same bounds, with the key and line.
	types := strings.Join(globs(257, 8), ", ")
	for _, c := range []struct{ name, entry, want string }{
		{"257 globs", "{id: e, tenant: acme, url: \"http://receiver.test/x\", event_types: [" + types + "]}", "endpoints[0] (id e).event_types: has 257 globs, more than the 256"},
		{"a glob of 129 bytes", "{id: e, tenant: acme, url: \"http://receiver.test/x\", event_types: [" + globs(1, 129)[0] + "]}", "endpoints[0] (id e).event_types[0]: is 129 bytes"},
		{"a URL of 4097 bytes", "{id: e, tenant: acme, url: \"" + longURL(4097) + "\"}", "endpoints[0] (id e).url: is 4097 bytes"},
		{"65 headers", "{id: e, tenant: acme, url: \"http://receiver.test/x\", headers: {X-A: v" + headerYAML(64) + "}}", "endpoints[0] (id e).headers: has 65 headers"},
	} {
		_, err := config.Parse([]byte("admin: {tokens: [{token: t0123456789abcdef}]}\nendpoints:\n  - "+c.entry+"\n"), "test.yaml", nil)
		if err == nil || !strings.Contains(err.Error(), "test.yaml:3: "+c.want) {
			t.Errorf("config.yaml with %s: %v; want %q", c.name, err, c.want)
		}
	}
}

// headerYAML is n more flow-mapping header entries, each ", X-Hn: v".
func headerYAML(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, ", X-H%d: v", i)
	}
	return b.String()
}

// An endpoint stored by an earlier build, which took any max_in_flight
// through the admin API, keeps its value after the upgrade. A PATCH of
// another field (here: disabling it during an incident) must still be
// possible, as it is for a stored timeout over 1h or a source deleted
// since: the whole merged endpoint was validated, so every PATCH was 422
// "max_in_flight must be from 1 to 10000" until the operator also lowered
// max_in_flight.
func TestPatchOfEndpointStoredWithLargeMaxInFlight(t *testing.T) {
	g := startGateway(t, gwOptions{})
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "wide", "url": "http://receiver.test/wide"}))
	// What an earlier build stored.
	if _, err := g.Store().UpdateEndpoint(context.Background(), "wide", func(ep *storage.Endpoint) error {
		ep.MaxInFlight = 50_000
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g = g.restart(gwOptions{})
	st, _, b := g.api("PATCH", "/endpoints/wide", acmeToken, jsonMap{"disabled": true})
	if st != 200 {
		t.Fatalf("PATCH {disabled: true} of an endpoint stored with max_in_flight 50000: %d %s; want 200", st, b)
	}
}

// cancelStore is the real store whose CancelEndpoint can be held until
// released (a large backlog) or made to fail once.
type cancelStore struct {
	storage.Store
	hold    chan struct{} // non-nil: CancelEndpoint waits until closed
	entered chan struct{}
	once    sync.Once
	mu      sync.Mutex
	fail    bool
}

func (s *cancelStore) CancelEndpoint(ctx context.Context, ep string) (int, error) {
	s.mu.Lock()
	fail := s.fail
	s.fail = false
	s.mu.Unlock()
	if fail {
		return 0, errors.New("injected: write failed")
	}
	if s.hold != nil {
		s.once.Do(func() { close(s.entered) })
		select {
		case <-s.hold:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.Store.CancelEndpoint(ctx, ep)
}

// doomedEndpoint creates endpoint "doomed" of tenant acme, which refuses
// connections and retries only hourly, and ingests n events for it.
func doomedEndpoint(t *testing.T, g *gw, n int) {
	t.Helper()
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{
		"id": "doomed", "url": "http://127.0.0.1:1/refused", "sources": []string{"open"},
		"retry": jsonMap{"initial_interval": "1h", "max_interval": "1h", "max_elapsed": "2h", "randomization": 0},
	}))
	for i := range n {
		if st, _, b := g.post("open", []byte(`{"id":"doomed-`+string(rune('a'+i))+`","type":"t"}`), nil); st != 202 {
			t.Fatalf("ingest: %d %s", st, b)
		}
	}
}

// liveDeliveries counts the pending or delivering deliveries of endpoint
// "doomed".
func liveDeliveries(t *testing.T, s storage.Store) int {
	t.Helper()
	ds, _, err := s.ListDeliveries(context.Background(), storage.DeliveryFilter{Endpoint: "doomed", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range ds {
		if !d.State.Terminal() {
			n++
		}
	}
	return n
}

// TestDeletingAnEndpointWithABacklogHoldsUpNoOtherChange: cancelling a
// large backlog takes minutes. Meanwhile every other catalog change, of
// any tenant, goes on (before, all of them waited, so an idempotent POST
// could outlive its key's lease and run twice); only an endpoint with the
// deleted id waits, or it would get the old one's deliveries.
func TestDeletingAnEndpointWithABacklogHoldsUpNoOtherChange(t *testing.T) {
	cs := &cancelStore{hold: make(chan struct{}), entered: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { cs.Store = s; return cs }})
	var once sync.Once
	release := func() { once.Do(func() { close(cs.hold) }) }
	t.Cleanup(release)
	doomedEndpoint(t, g, 2)

	deleted := make(chan int, 1)
	go func() {
		st, _, _ := g.api("DELETE", "/endpoints/doomed", acmeToken, nil)
		deleted <- st
	}()
	<-cs.entered
	client := &http.Client{Timeout: 5 * time.Second}
	for _, c := range []struct{ token, body string }{
		{acmeToken, `{"id":"other","url":"http://receiver.test/other"}`},
		{opToken, `{"id":"globex-ep","tenant":"globex","url":"http://receiver.test/globex"}`},
	} {
		req, _ := http.NewRequest("POST", "http://"+g.AdminAddr()+"/api/v1/endpoints", strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST /endpoints while a backlog is being cancelled: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("POST /endpoints while a backlog is being cancelled: %d", resp.StatusCode)
		}
	}
	st, hdr, b := g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "doomed", "url": "http://receiver.test/new"})
	if p := wantProblem(t, "the deleted id", 409, "id")(st, hdr, b); !strings.HasSuffix(p.Type, "endpoint-being-deleted") || hdr.Get("Retry-After") == "" {
		t.Fatalf("problem %+v, Retry-After %q", p, hdr.Get("Retry-After"))
	}

	release()
	if st := <-deleted; st != 204 {
		t.Fatalf("DELETE: %d", st)
	}
	if n := liveDeliveries(t, g.Store()); n != 0 {
		t.Fatalf("%d deliveries of the deleted endpoint still live after the 204", n)
	}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "doomed", "url": "http://receiver.test/new"}))
}

// TestAFailedBacklogCancelIsRetried: the endpoint is gone once DELETE
// has deleted it; a cancel of its deliveries that fails is retried in the
// background, so none stays pending for an endpoint that no longer exists.
func TestAFailedBacklogCancelIsRetried(t *testing.T) {
	t.Parallel()
	cs := &cancelStore{}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { cs.Store = s; return cs }})
	doomedEndpoint(t, g, 2)
	cs.mu.Lock()
	cs.fail = true
	cs.mu.Unlock()
	must[jsonMap](t, 204)(g.api("DELETE", "/endpoints/doomed", acmeToken, nil))
	testsupport.WaitFor(t, 10*time.Second, "the backlog to be cancelled", func() bool { return liveDeliveries(t, g.Store()) == 0 })
	wantProblem(t, "deleted", 404, "")(g.api("GET", "/endpoints/doomed", acmeToken, nil))
	if !strings.Contains(g.logs.String(), "will retry") {
		t.Fatalf("the failed cancel was not logged:\n%s", g.logs.String())
	}
}

// TestABacklogLeftByACrashIsCancelledAtStart: a process that died between
// deleting an endpoint and cancelling its deliveries left them pending
// for nobody. The next start finds and cancels them, and keeps the id
// from being reused until then.
func TestABacklogLeftByACrashIsCancelledAtStart(t *testing.T) {
	g := startGateway(t, gwOptions{})
	doomedEndpoint(t, g, 3)
	dir := g.dir
	if err := g.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// What the crashed process got done: the endpoint deleted, no more.
	db, err := badger.Open(dir, badger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteEndpoint(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	if n := liveDeliveries(t, db); n != 3 {
		t.Fatalf("%d live deliveries before the restart, want 3", n)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	g = startGateway(t, gwOptions{dir: dir})
	testsupport.WaitFor(t, 10*time.Second, "the orphaned backlog to be cancelled", func() bool { return liveDeliveries(t, g.Store()) == 0 })
	testsupport.WaitFor(t, 10*time.Second, "the id to be free again", func() bool {
		st, _, _ := g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "doomed", "url": "http://receiver.test/new"})
		return st == 201
	})
	if !strings.Contains(g.logs.String(), "an endpoint deleted earlier still has live deliveries") {
		t.Fatalf("the orphaned backlog was not logged:\n%s", g.logs.String())
	}
}

// metricLine returns the value text of one metric line (name{labels}) on
// /metrics, "" when absent.
func (h *gw) metricLine(series string) string {
	h.t.Helper()
	resp, err := http.Get("http://" + h.AdminAddr() + "/metrics")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// An attempt already in flight when acme deletes its endpoint "shared"
// keeps running (SetEndpoints only stops the loop claiming). In an
// earlier version, if it then got 410 Gone, Dispatcher.disable persisted
// "disabled" by endpoint id without checking that the stored endpoint was
// still the one the attempt was sent to. Endpoint ids are global: globex has meanwhile created its own
// "shared", and acme's old receiver disables globex's endpoint
// (SPEC 5: a tenant changes only its tenant).
func TestStale410DoesNotDisableAnotherTenantsEndpoint(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-time.After(15 * time.Second):
		}
		w.WriteHeader(http.StatusGone)
	}))
	t.Cleanup(old.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	globexRcv := newReceiver(t)
	g := startGateway(t, gwOptions{})

	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken,
		jsonMap{"id": "shared", "url": old.URL + "/acme", "timeout": "20s"}))
	must[jsonMap](t, 202)(g.post("open", []byte(`{"id":"gone-1","type":"x"}`), nil))
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached acme's receiver")
	}

	// acme deletes its endpoint while the attempt is in flight; globex
	// takes the id.
	if st, _, b := g.api("DELETE", "/endpoints/shared", acmeToken, nil); st != 204 {
		t.Fatalf("delete: %d %s", st, b)
	}
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", opToken,
		jsonMap{"id": "shared", "tenant": "globex", "url": globexRcv.url("globex")}))

	// acme's old receiver answers 410 to the old attempt.
	close(release)
	// The attempt's slot is freed only after its outcome (and any disable)
	// was handled: wait for it.
	testsupport.WaitFor(t, 15*time.Second, "the old attempt to finish", func() bool {
		return g.metricLine(`hookgate_delivery_in_flight{endpoint="shared"}`) == "0"
	})
	ep := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/shared", opToken, nil))
	if ep.Tenant != "globex" {
		t.Fatalf("endpoint shared is %q's", ep.Tenant)
	}
	if ep.Disabled {
		t.Fatalf("globex's new endpoint %q was disabled by a 410 from acme's deleted endpoint's URL (reason %q)",
			ep.ID, ep.DisabledReason)
	}
}

// cancelGatedStore holds CancelEndpoint, once armed, until gate closes.
type cancelGatedStore struct {
	storage.Store
	armed   atomic.Bool
	entered chan struct{}
	gate    chan struct{}
}

func (s *cancelGatedStore) CancelEndpoint(ctx context.Context, id string) (int, error) {
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.gate
	}
	return s.Store.CancelEndpoint(ctx, id)
}

// deleteEndpoint held the registry's inUse lock exclusively across
// CancelEndpoint (its first version), which cancels the
// endpoint's whole backlog, 512 deliveries per durable write.
// Every ingest and POST /events of every tenant takes inUse (read side)
// first, so all of them stalled for as long as that cancel runs, though the
// lock is needed only until the registry no longer lists the endpoint
// (writers after that never target it; writers before it are done).
// Deleting an endpoint with a large backlog (the usual reason to delete
// one) then stalled ingest for everybody: providers time out and retry.
//
// The test holds the cancel (a stand-in for a long backlog) and sends an
// ingest of another tenant, to a source with no endpoint at all.
func TestDeleteEndpointDoesNotStallOtherTenantsIngest(t *testing.T) {
	gs := &cancelGatedStore{entered: make(chan struct{}), gate: make(chan struct{})}
	g := startGateway(t, gwOptions{wrapStore: func(s storage.Store) storage.Store { gs.Store = s; return gs }})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gs.gate) }) }
	t.Cleanup(openGate)

	rcv := newReceiver(t)
	must[admin.Endpoint](t, 201)(g.api("POST", "/endpoints", acmeToken, jsonMap{"id": "backlogged", "url": rcv.url("acme")}))
	gs.armed.Store(true)
	deleted := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodDelete, "http://"+g.AdminAddr()+"/api/v1/endpoints/backlogged", nil)
		req.Header.Set("Authorization", "Bearer "+acmeToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			deleted <- 0
			return
		}
		resp.Body.Close()
		deleted <- resp.StatusCode
	}()
	select {
	case <-gs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the delete never reached CancelEndpoint")
	}

	ingested := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+g.PublicAddr()+"/ingest/other", "application/json", strings.NewReader(`{"n":1}`))
		if err != nil {
			ingested <- 0
			return
		}
		resp.Body.Close()
		ingested <- resp.StatusCode
	}()
	select {
	case st := <-ingested:
		if st != 202 {
			t.Fatalf("globex ingest: %d", st)
		}
	case <-time.After(5 * time.Second):
		openGate()
		t.Fatalf("globex's ingest (a source with no endpoints) waited >5s for acme's DELETE /endpoints/backlogged to finish cancelling its backlog")
	}
	openGate()
	if st := <-deleted; st != 204 {
		t.Fatalf("delete: %d", st)
	}
}

// TestIDNSpellingsOfBlockedHostsAreRefusedUpFront: the admin API refuses,
// with 422, an endpoint URL whose host is a blocked address or localhost,
// because every delivery to it would be refused at dial time. A host
// written with Unicode characters that IDNA maps to such a host (full-width
// digits and dots, an enclosed letter) is dialled by net/http as the mapped
// host, and gets the same 422 (it got a 201, and a delivery that failed for
// its whole retry window).
func TestIDNSpellingsOfBlockedHostsAreRefusedUpFront(t *testing.T) {
	rcv := newReceiver(t)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(rcv.srv.URL, "http://"))
	g := startCustom(t, func(dir string) string {
		return fmt.Sprintf(`
server: {listen: "127.0.0.1:0"}
admin: {listen: "127.0.0.1:0", tokens: [{token: %s}]}
storage: {path: %q}
delivery:
  allow_private_targets: false
sources:
  - {id: open, tenant: acme, verify: {scheme: none}, event_id: json:/id}
endpoints:
  - {id: public, tenant: acme, url: "https://example.com/hooks"}
`, opToken, dir)
	}, nil)
	for _, host := range []string{
		"１２７．０．０．１",       // full-width digits and dots: 127.0.0.1
		"127。0。0。1",       // ideographic full stops: 127.0.0.1
		"ⓛocalhost",       // enclosed small l: localhost
		"ｌｏｃａｌｈｏｓｔ",       // full-width: localhost
		"１６９．２５４．１６９．２５４", // cloud metadata
	} {
		u := "http://" + host + ":" + port + "/api"
		st, _, b := g.api("POST", "/endpoints", opToken, jsonMap{"id": "api", "tenant": "acme", "url": u})
		if st != 422 || !strings.Contains(string(b), "allow_private_targets") {
			t.Errorf("POST /endpoints with %s: %d %s; want 422 naming allow_private_targets, as for the ASCII spelling", u, st, b)
			if st == 201 {
				g.api("DELETE", "/endpoints/api", opToken, nil)
			}
		}
		if st, _, b := g.api("PATCH", "/endpoints/public", opToken, jsonMap{"url": u}); st != 422 {
			t.Errorf("PATCH to %s: %d %s; want 422", u, st, b)
		}
	}
}
