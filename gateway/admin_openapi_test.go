package gateway

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookgate/gateway/admin"
)

// TestAdminOpenAPIMatchesRoutes: every /api/v1 route the admin app
// registers is in openapi.json, with its method, and the document lists
// no route that does not exist.
func TestAdminOpenAPIMatchesRoutes(t *testing.T) {
	g := startGateway(t, gwOptions{})
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Servers []struct{ URL string }                `json:"servers"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(admin.OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") || len(doc.Servers) != 1 || doc.Servers[0].URL != "/api/v1" {
		t.Fatalf("openapi %q, servers %+v", doc.OpenAPI, doc.Servers)
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options", "trace":
				documented[strings.ToUpper(method)+" /api/v1"+path] = true
			}
		}
	}
	param := regexp.MustCompile(`:([A-Za-z0-9_]+)`)
	registered := map[string]bool{}
	for _, r := range g.admin.GetRoutes(true) {
		if !strings.HasPrefix(r.Path, "/api/v1/") || r.Method == http.MethodHead {
			continue // Fiber adds HEAD to every GET
		}
		registered[r.Method+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
	}
	if len(registered) < 20 {
		t.Fatalf("only %d routes registered: %v", len(registered), registered)
	}
	for r := range registered {
		if !documented[r] {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for r := range documented {
		if !registered[r] {
			t.Errorf("openapi.json lists %s, which is not a route", r)
		}
	}

	// Every $ref points at something, and the document is served as is.
	var tree any
	_ = json.Unmarshal(admin.OpenAPI(), &tree)
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				refs = append(refs, r)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(tree)
	for _, ref := range refs {
		node := tree
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			m, _ := node.(map[string]any)
			node = m[part]
		}
		if node == nil {
			t.Errorf("dangling $ref %s", ref)
		}
	}
	st, hdr, b := g.api("GET", "/openapi.json", "", nil)
	if st != 200 || !slices.Equal(b, admin.OpenAPI()) || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", st, hdr.Get("Content-Type"))
	}
}

// TestOpenAPIListsTheQueryParameterAnswerOfEveryChange: a
// query parameter on a POST, PATCH or DELETE is 400 (refuseQueryOfChanges:
// "DELETE /endpoints/a?force=1" no longer deletes as if the parameter were
// understood). openapi.json must list that answer for each such route, in
// the route's own responses: the document's description names 400 as
// every route's answer only for ambiguous framing and unknown methods, so
// a client generated from it has no 400 for, e.g., DELETE /endpoints/{id}
// (204, 401, 404, 503) and cannot tell a refused delete from an unexpected
// one.
func TestOpenAPIListsTheQueryParameterAnswerOfEveryChange(t *testing.T) {
	g := startGateway(t, gwOptions{})
	ops, _ := openapiOperations(t)
	names := make([]string, 0, len(ops))
	for k := range ops {
		names = append(names, k)
	}
	sort.Strings(names)
	checked := 0
	for _, op := range names {
		method, path, _ := strings.Cut(op, " ")
		if method != "POST" && method != "PATCH" && method != "DELETE" {
			continue
		}
		checked++
		target := strings.ReplaceAll(path, "{id}", "nope") + "?force=1"
		st, hdr, body := g.api(method, target, opToken, "{}")
		if st != 400 {
			t.Errorf("%s %s: %d %s; want the 400 every change with a query parameter gets", method, target, st, body)
			continue
		}
		if p := decodeProblem(t, hdr, body); p.Field != "force" {
			t.Errorf("%s %s: the problem names %q, want force", method, target, p.Field)
		}
		if !ops[op][400] && !ops[op][0] {
			t.Errorf("%s answers 400 to a query parameter (%s), but openapi.json lists no 400 for it", op, target)
		}
	}
	if checked < 10 {
		t.Fatalf("only %d POST/PATCH/DELETE routes in openapi.json", checked)
	}
}

// TestOpenAPIEndpointTimeoutIsOneTheAPITakes: openapi.json describes an
// endpoint's timeout as `Go duration, e.g. "15s", "24h"`, with no bound,
// but the API refuses any timeout over storage.MaxAttemptTimeout (1h) with
// a 422: a client that follows the document's own example is refused, and
// nothing in the document says what the limit is. Every duration the
// document gives as an example of an endpoint timeout must be accepted,
// and the document must name the bound.
func TestOpenAPIEndpointTimeoutIsOneTheAPITakes(t *testing.T) {
	g := startGateway(t, gwOptions{})
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Description string   `json:"description"`
					Examples    []string `json:"examples"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(admin.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	timeout, ok := doc.Components.Schemas["EndpointInput"].Properties["timeout"]
	if !ok {
		t.Fatal("openapi.json has no EndpointInput.timeout")
	}
	examples := append([]string(nil), timeout.Examples...)
	for _, m := range regexp.MustCompile(`"([0-9][0-9a-zµ.]*)"`).FindAllStringSubmatch(timeout.Description, -1) {
		examples = append(examples, m[1])
	}
	if len(examples) == 0 {
		t.Fatalf("EndpointInput.timeout gives no example: %q", timeout.Description)
	}
	for i, ex := range examples {
		if _, err := time.ParseDuration(ex); err != nil {
			continue
		}
		st, _, body := g.api("POST", "/endpoints", acmeToken, jsonMap{
			"id": "rv45-timeout-" + strconv.Itoa(i), "url": "http://receiver.test/t", "timeout": ex,
		})
		if st != 201 {
			t.Errorf("openapi.json gives %q as an example of an endpoint's timeout (%q), but POST /endpoints with it answers %d: %s",
				ex, timeout.Description, st, body)
		}
	}
	// The API's bound is a fact a client needs: the document must say it.
	if st, _, _ := g.api("POST", "/endpoints", acmeToken, jsonMap{"url": "http://receiver.test/t", "timeout": "1h0m1s"}); st != 422 {
		t.Fatalf("a timeout of 1h0m1s: %d, want 422", st)
	}
	if !strings.Contains(timeout.Description, "1h") {
		t.Errorf("EndpointInput.timeout (%q) does not say that a timeout over 1h (storage.MaxAttemptTimeout) is refused with 422", timeout.Description)
	}
}

// openapiOperations reads openapi.json: every (method, path) with the
// statuses its responses list ("default" as 0), and the statuses the
// document's description names as answers of every route (405, 413, …).
func openapiOperations(t *testing.T) (ops map[string]map[int]bool, general map[int]bool) {
	t.Helper()
	var doc struct {
		Info  struct{ Description string } `json:"info"`
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(admin.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	general = map[int]bool{}
	for _, m := range regexp.MustCompile(`\b[1-5][0-9][0-9]\b`).FindAllString(doc.Info.Description, -1) {
		n, _ := strconv.Atoi(m)
		general[n] = true
	}
	ops = map[string]map[int]bool{}
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op struct{ Responses map[string]json.RawMessage }
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			st := map[int]bool{}
			for code := range op.Responses {
				n, _ := strconv.Atoi(code) // "default" is 0
				st[n] = true
			}
			ops[strings.ToUpper(method)+" "+path] = st
		}
	}
	return ops, general
}

// TestOpenAPIListsTheFramingAnswersOfEveryRoute: openapi.json (served at
// /api/v1/openapi.json, the document a client is generated from) lists
// for each route the statuses it answers, and in its description the ones
// every route may answer (405, 413, 415). Every route of the admin
// listener also answers 501 to a transfer coding other than chunked, and
// 400 to chunked not last, to Host sent twice and to a malformed header
// line (checkFraming), and 400 to a method Fiber does not know
// (refuseUnknownMethods). Each answer must be one the document lists for
// the route, or names as every route's (or a "default" response).
func TestOpenAPIListsTheFramingAnswersOfEveryRoute(t *testing.T) {
	g := startGateway(t, gwOptions{})
	ops, general := openapiOperations(t)
	if len(ops) < 20 {
		t.Fatalf("only %d operations in openapi.json", len(ops))
	}
	cases := []struct{ what, method, headers, body string }{
		{"Transfer-Encoding: gzip, chunked", "", "Transfer-Encoding: gzip, chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"},
		{"Transfer-Encoding: chunked, gzip", "", "Transfer-Encoding: chunked, gzip\r\n", "2\r\n{}\r\n0\r\n\r\n"},
		{"Host sent twice", "", "Host: other\r\nContent-Length: 2\r\n", "{}"},
		{"a folded header line", "", "X-A: 1\r\n  folded\r\nContent-Length: 2\r\n", "{}"},
		{"an unknown method", "PROPFIND", "Content-Length: 2\r\n", "{}"},
	}
	names := make([]string, 0, len(ops))
	for k := range ops {
		names = append(names, k)
	}
	sort.Strings(names)
	undocumented := map[string][]string{} // "case → status" → routes
	for _, op := range names {
		method, path, _ := strings.Cut(op, " ")
		target := "/api/v1" + strings.ReplaceAll(path, "{id}", "nope")
		for _, c := range cases {
			m := method
			if c.method != "" {
				m = c.method
			}
			raw := m + " " + target + " HTTP/1.1\r\nHost: hookgate\r\nAuthorization: Bearer " + opToken + "\r\n" + c.headers + "\r\n" + c.body
			a := rawExchange(t, g.AdminAddr(), raw)
			if a.status == 0 {
				t.Fatalf("%s with %s: no answer", op, c.what)
			}
			if ops[op][a.status] || ops[op][0] || general[a.status] {
				continue
			}
			k := c.what + " → " + strconv.Itoa(a.status)
			undocumented[k] = append(undocumented[k], op)
		}
	}
	keys := make([]string, 0, len(undocumented))
	for k := range undocumented {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Errorf("%s, which openapi.json does not list for %d of %d routes: %v", k, len(undocumented[k]), len(ops), undocumented[k])
	}
}

// TestOpenAPIDeclaresIdempotentReplayedOnEveryPost: SPEC section 5 says
// every admin POST honours an Idempotency-Key and a retry gets the stored
// answer "with Idempotent-Replayed: true". openapi.json declared that
// header only on POST /events' 202: a client generated from it had no
// such field on, e.g., POST /endpoints' 201, and could not tell a create
// it made from one it is shown again.
func TestOpenAPIDeclaresIdempotentReplayedOnEveryPost(t *testing.T) {
	g := startGateway(t, gwOptions{})
	var tree struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(admin.OpenAPI(), &tree); err != nil {
		t.Fatal(err)
	}
	type response struct {
		Headers map[string]json.RawMessage `json:"headers"`
	}
	postResponses := func(path string) map[string]response {
		var op struct{ Responses map[string]response }
		raw, ok := tree.Paths[path]["post"]
		if !ok {
			t.Fatalf("POST %s is not in openapi.json", path)
		}
		if err := json.Unmarshal(raw, &op); err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return op.Responses
	}
	for _, c := range []struct{ path, body string }{
		{"/sources", `{"id":"rv34-src","verify":{"scheme":"none"}}`},
		{"/endpoints", `{"url":"http://127.0.0.1:1/rv34"}`},
		{"/replays", `{"source":"open"}`},
		{"/events", `{"source":"open","payload":{"id":"rv34-evt"}}`},
	} {
		st1, _, b1 := g.api("POST", c.path, opToken, c.body, "Idempotency-Key", "rv34"+c.path)
		st2, h2, b2 := g.api("POST", c.path, opToken, c.body, "Idempotency-Key", "rv34"+c.path)
		if st1 >= 300 || st2 != st1 || string(b2) != string(b1) || h2.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("POST %s twice under one key: %d then %d (Idempotent-Replayed %q): %s / %s",
				c.path, st1, st2, h2.Get("Idempotent-Replayed"), b1, b2)
		}
		if _, ok := postResponses(c.path)[strconv.Itoa(st1)].Headers["Idempotent-Replayed"]; !ok {
			t.Errorf("POST %s answers %d with Idempotent-Replayed: true to a retry under its key, but openapi.json does not declare the header on that response", c.path, st1)
		}
	}
}
