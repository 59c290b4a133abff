package gateway

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
	"hookgate/internal/testsupport"
)

func TestAdminAuth(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for name, auth := range map[string]string{
		"missing":      "",
		"wrong token":  "Bearer nope",
		"prefix":       "Bearer operator-toke",
		"longer":       "Bearer operator-token-x",
		"basic scheme": "Basic b3BlcmF0b3ItdG9rZW4=",
		"empty bearer": "Bearer ",
	} {
		for _, path := range []string{"/events", "/endpoints", "/nope"} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/api/v1"+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			st, hdr, b := do(t, req)
			wantProblem(t, name+" "+path, 401, "")(st, hdr, b)
			if !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s: WWW-Authenticate %q", name, hdr.Get("WWW-Authenticate"))
			}
		}
	}
	// A POST without a token is refused before its Idempotency-Key is looked at.
	wantProblem(t, "post", 401, "")(g.api("POST", "/endpoints", "", jsonMap{"url": "http://x.test"}, "Idempotency-Key", "k"))
	for _, tok := range []string{opToken, acmeToken} {
		must[admin.List[jsonMap]](t, 200)(g.api("GET", "/events", tok, nil))
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+"/api/v1/events", nil)
	req.Header.Set("Authorization", "bearer "+acmeToken) // the scheme is case-insensitive
	if st, _, b := do(t, req); st != 200 {
		t.Fatalf("lowercase bearer: %d %s", st, b)
	}
	// No token: health, readiness, metrics and the API description.
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/api/v1/openapi.json"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+g.AdminAddr()+path, nil)
		if st, _, b := do(t, req); st != 200 {
			t.Fatalf("%s: %d %s", path, st, b)
		}
	}
	// An unknown route with a valid token is a problem+json 404.
	wantProblem(t, "unknown route", 404, "")(g.api("GET", "/nope", opToken, nil))
}

// TestAdminTenantIsolation: a tenant token gets 404 for every resource of
// another tenant, on every route that takes an id, and changes nothing.
func TestAdminTenantIsolation(t *testing.T) {
	rcv := newReceiver(t)
	g := startGateway(t, gwOptions{extra: fmt.Sprintf(`endpoints:
  - {id: acme-ep, tenant: acme, url: %q}
  - {id: globex-ep, tenant: globex, url: %q}
`, rcv.url("acme"), rcv.url("globex"))})
	st, _, b := g.post("other", []byte(`{"id":"g1"}`), nil)
	if st != 202 {
		t.Fatalf("ingest: %d %s", st, b)
	}
	evt := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	testsupport.WaitFor(t, 10*time.Second, "the globex delivery", func() bool { return rcv.count() == 1 })
	dl := must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, opToken, nil))
	if len(dl.Data) != 1 {
		t.Fatalf("deliveries of %s: %+v", evt, dl)
	}
	dlv := dl.Data[0].ID
	rpl := must[admin.Replay](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"source": "other", "status": "cancelled"})).ID
	before := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/globex-ep", opToken, nil))

	routes := []struct {
		method, path string
		body         any
	}{
		{"GET", "/events/" + evt, nil},
		{"POST", "/events/" + evt + "/replay", nil},
		{"GET", "/deliveries/" + dlv, nil},
		{"POST", "/deliveries/" + dlv + "/retry", nil},
		{"GET", "/endpoints/globex-ep", nil},
		{"PATCH", "/endpoints/globex-ep", jsonMap{"url": "http://evil.test/"}},
		{"POST", "/endpoints/globex-ep/rotate-secret", nil},
		{"DELETE", "/endpoints/globex-ep", nil},
		{"GET", "/sources/other", nil},
		{"PATCH", "/sources/other", jsonMap{"event_id": "json:/x"}},
		{"DELETE", "/sources/other", nil},
		{"GET", "/replays/" + rpl, nil},
	}
	for _, r := range routes {
		p := wantProblem(t, "acme on "+r.method+" "+r.path, 404, "")(g.api(r.method, r.path, acmeToken, r.body))
		if strings.Contains(p.Detail, "globex") {
			t.Fatalf("%s %s: the 404 names the other tenant: %+v", r.method, r.path, p)
		}
		// The same id that does not exist at all reads the same.
		missing := strings.Replace(r.path, "globex-ep", "no-such-ep", 1)
		if missing != r.path {
			q := wantProblem(t, "missing "+missing, 404, "")(g.api(r.method, missing, acmeToken, r.body))
			if q != p {
				t.Fatalf("a foreign endpoint and a missing one answer differently: %+v vs %+v", p, q)
			}
		}
	}
	// Nothing changed, and nothing new was delivered.
	after := must[admin.Endpoint](t, 200)(g.api("GET", "/endpoints/globex-ep", opToken, nil))
	if after.URL != before.URL || after.Secret != before.Secret || after.Disabled {
		t.Fatalf("globex endpoint changed: %+v -> %+v", before, after)
	}
	must[admin.Source](t, 200)(g.api("GET", "/sources/other", opToken, nil))
	if n := len(must[admin.List[admin.Delivery]](t, 200)(g.api("GET", "/deliveries?event="+evt, opToken, nil)).Data); n != 1 {
		t.Fatalf("%d deliveries of the globex event, want 1", n)
	}
	// Lists show only the token's tenant.
	for _, path := range []string{"/events", "/deliveries", "/endpoints", "/sources", "/events?source=other", "/deliveries?endpoint=globex-ep", "/deliveries?event=" + evt} {
		l := must[admin.List[jsonMap]](t, 200)(g.api("GET", path, acmeToken, nil))
		for _, item := range l.Data {
			if item["tenant"] != "acme" {
				t.Fatalf("acme sees %v in %s", item, path)
			}
		}
	}
	ids := func(l admin.List[jsonMap]) (out []string) {
		for _, item := range l.Data {
			out = append(out, item["id"].(string))
		}
		return out
	}
	if got := ids(must[admin.List[jsonMap]](t, 200)(g.api("GET", "/sources", acmeToken, nil))); !slices.Equal(got, []string{"open", "sw"}) {
		t.Fatalf("acme's sources %v", got)
	}
	if got := ids(must[admin.List[jsonMap]](t, 200)(g.api("GET", "/sources", opToken, nil))); !slices.Equal(got, []string{"open", "other", "sw"}) {
		t.Fatalf("operator's sources %v", got)
	}
	// Naming another tenant's resource in a body is refused the same way.
	wantProblem(t, "publish to globex", 422, "source")(g.api("POST", "/events", acmeToken, jsonMap{"source": "other", "payload": jsonMap{}}))
	wantProblem(t, "replay globex", 422, "source")(g.api("POST", "/replays", acmeToken, jsonMap{"source": "other"}))
	wantProblem(t, "replay to globex", 422, "endpoint")(g.api("POST", "/replays", acmeToken, jsonMap{"endpoint": "globex-ep"}))
	wantProblem(t, "endpoint in globex", 422, "tenant")(g.api("POST", "/endpoints", acmeToken, jsonMap{"tenant": "globex", "url": rcv.url("x")}))
	wantProblem(t, "endpoint on globex source", 422, "sources[0]")(g.api("POST", "/endpoints", acmeToken, jsonMap{"url": rcv.url("x"), "sources": []string{"other"}}))
	wantProblem(t, "source in globex", 422, "tenant")(g.api("POST", "/sources", acmeToken, jsonMap{"id": "s", "tenant": "globex", "verify": jsonMap{"scheme": "none"}}))
	// The operator's bulk replay of every tenant is not the tenant's business.
	all := must[admin.Replay](t, 202)(g.api("POST", "/replays", opToken, jsonMap{"status": "cancelled"}))
	wantProblem(t, "all-tenant replay", 404, "")(g.api("GET", "/replays/"+all.ID, acmeToken, nil))
}

// rawAdminRequest sends one raw HTTP/1.1 request line (method, request-target)
// to the admin listener with an optional token, and returns the status.
func rawAdminRequest(t *testing.T, g *gw, method, target, token, body string) (int, string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", g.AdminAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var auth string
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: a\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		method, target, auth, len(body), body)
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	n := 0
	for {
		m, err := conn.Read(buf[n:])
		n += m
		if err != nil || n == len(buf) {
			break
		}
	}
	resp := string(buf[:n])
	var st int
	fmt.Sscanf(resp, "HTTP/1.1 %d", &st)
	return st, resp
}

// TestAdminRoutesNeedATokenInEverySpelling: no spelling of an /api/v1 route reaches it
// without a token.
func TestAdminRoutesNeedATokenInEverySpelling(t *testing.T) {
	g := startGateway(t, gwOptions{})
	for _, target := range []string{
		"/API/V1/events", "/api/v1//events", "//api/v1/events", "/api//v1/events", "/api/v1/events/",
		"/api/v1/./events", "/api/v1/x/../events", "/api/v1/%65vents", "/api/v1%2Fevents", "/api/%76%31/events",
		"/api/v1/sources", "/Api/v1/sources", "/api/v1/sources/open", "/api/v1/sources/open/",
		"http://a/api/v1/events", "/api/v1/openapi.json/../events", "/api/v1/events;x", "/api/v1/events%00",
		"/api/v1/openapi.json/../../api/v1/events", "/api/v1/openapi.json%2F..%2Fevents", "/api/v1/events#", "/api/v1/events?x=1",
	} {
		st, resp := rawAdminRequest(t, g, "GET", target, "", "")
		if st != 401 && st != 404 && st != 400 {
			i := strings.Index(resp, "\r\n\r\n")
			t.Errorf("GET %s without a token: %d %s", target, st, resp[i:])
		}
	}
	for _, target := range []string{"/API/V1/endpoints", "/api/v1//endpoints", "/api/v1/endpoints/", "//api/v1/endpoints", "/api/v1/%65ndpoints"} {
		st, resp := rawAdminRequest(t, g, "POST", target, "", `{"id":"pathx","tenant":"acme","url":"http://x.test/"}`)
		if st != 401 && st != 404 && st != 400 && st != 405 {
			t.Errorf("POST %s without a token: %d %s", target, st, resp)
		}
	}
	wantProblem(t, "not created", 404, "")(g.api("GET", "/endpoints/pathx", opToken, nil))
}
