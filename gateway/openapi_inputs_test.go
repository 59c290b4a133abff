package gateway

import (
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
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
