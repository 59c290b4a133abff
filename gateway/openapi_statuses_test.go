package gateway

import (
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// openapiOperations reads openapi.json: every (method, path) with the
// statuses its responses list ("default" as 0), and the statuses the
// document's description names as answers of every route (405, 413, …).
func openapiOperations(t *testing.T) (ops map[string]map[int]bool, general map[int]bool) {
	t.Helper()
	var doc struct {
		Info  struct{ Description string } `json:"info"`
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
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
	if err := json.Unmarshal(openapiDoc, &tree); err != nil {
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
