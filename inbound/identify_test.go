package inbound

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// headers builds a HeaderGetter with net/http's case-insensitive lookup from name, value pairs.
func identifyHeaders(kv ...string) HeaderGetter {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return HeaderFunc(h.Get)
}

// mustParse parses s or fails the test.
func mustParseExpr(t testing.TB, s string) Expr {
	t.Helper()
	e, err := ParseExpr(s)
	if err != nil {
		t.Fatalf("ParseExpr(%q): %v", s, err)
	}
	return e
}

// evalString evaluates expr on r and renders the result as value or "<nothing>".
func evalExpr(t *testing.T, expr string, r *Request) string {
	t.Helper()
	v, ok := mustParseExpr(t, expr).Eval(r)
	if !ok {
		if v != "" {
			t.Errorf("%q: yields nothing but returned %q", expr, v)
		}
		return "<nothing>"
	}
	return v
}

func TestParseExprErrors(t *testing.T) {
	tests := []struct {
		expr string
		want string // in the error message: names the bad part and what is wrong
	}{
		{"id", `part 1 "id": missing prefix`},
		{"body:/id", `part 1 "body:/id": unknown prefix "body"`},
		{"Header:X-Id", `unknown prefix "Header"`},
		{"header:", `part 1 "header:": empty header name`},
		{"header:X Id", `invalid character ' '`},
		{"header:X:Id", `invalid character ':'`},
		{"query:", "empty query parameter name"},
		{"query:a b", "invalid character ' '"},
		{"json:", "empty JSON pointer"},
		{"json:id", `must start with "/"`},
		{"json:/a~2b", `"~" not followed by 0 or 1`},
		{"json:/a~", `"~" not followed by 0 or 1`},
		{"header:A++header:B", `part 2 "": empty part`},
		{"+json:/id", `part 1 "": empty part`},
		{"json:/id+", `part 2 "": empty part`},
		{"json:/id+query:x+bogus:1", `part 3 "bogus:1": unknown prefix`},
		{strings.Repeat("header:a+", 8) + "header:a", "more than 8 parts"},
		{"json:/" + strings.Repeat("a", MaxExprLen), "longer than 256 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			e, err := ParseExpr(tt.expr)
			if err == nil {
				t.Fatalf("ParseExpr(%q) = %v, want error", tt.expr, e)
			}
			if !errors.Is(err, ErrBadExpr) {
				t.Errorf("error %v does not wrap ErrBadExpr", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if !e.IsZero() {
				t.Errorf("failed parse returned non-zero Expr %v", e)
			}
		})
	}
}

func TestParseExprRoundTrip(t *testing.T) {
	for _, s := range []string{
		"json:/id",
		"header:X-GitHub-Hook-ID+header:X-GitHub-Delivery",
		"query:event_id",
		"json:/a~1b/m~0n/0",
		"json:/",
		"header:x+query:y+json:/z",
		strings.Repeat("header:a+", 7) + "header:a",
		"json:/" + strings.Repeat("a", MaxExprLen-len("json:/")),
	} {
		e := mustParseExpr(t, s)
		if e.IsZero() {
			t.Errorf("ParseExpr(%q).IsZero() = true", s)
		}
		if got := e.String(); got != s {
			t.Errorf("ParseExpr(%q).String() = %q", s, got)
		}
	}
}

func TestExprZero(t *testing.T) {
	e := mustParseExpr(t, "")
	if !e.IsZero() || e.String() != "" {
		t.Fatalf("ParseExpr(\"\") = %q, IsZero %v; want the zero Expr", e, e.IsZero())
	}
	r := &Request{Header: identifyHeaders("X-Id", "1"), Body: []byte(`{"id":"1"}`)}
	if v, ok := e.Eval(r); ok {
		t.Errorf("zero Expr yielded %q", v)
	}
	if v, ok := mustParseExpr(t, "json:/id").Eval(nil); ok {
		t.Errorf("Eval(nil) yielded %q", v)
	}
}

func TestExprParts(t *testing.T) {
	q := url.Values{"id": {"q-1"}, "empty": {""}}
	r := &Request{
		Header: identifyHeaders("X-Event-Id", "h-1", "X-Empty", ""),
		Query:  q.Get,
		Body:   []byte(`{"id":"j-1","n":7}`),
	}
	tests := map[string]string{
		"header:X-Event-Id": "h-1",
		"header:x-event-id": "h-1", // the HeaderGetter decides case; net/http ignores it
		"header:X-Missing":  "<nothing>",
		"header:X-Empty":    "<nothing>",
		"query:id":          "q-1",
		"query:ID":          "<nothing>",
		"query:empty":       "<nothing>",
		"json:/id":          "j-1",
		"json:/n":           "7",
		"json:/missing":     "<nothing>",
	}
	for expr, want := range tests {
		if got := evalExpr(t, expr, r); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}

	bare := &Request{Body: []byte(`{}`)} // nil Header and Query: nothing, no panic
	for _, expr := range []string{"header:X-Event-Id", "query:id"} {
		if got := evalExpr(t, expr, bare); got != "<nothing>" {
			t.Errorf("%s on a bare request = %q, want nothing", expr, got)
		}
	}
}

func TestExprComposite(t *testing.T) {
	r := &Request{
		Header: identifyHeaders("A", "1", "B", "two", "Empty", ""),
		Query:  url.Values{"c": {"3"}}.Get,
		Body:   []byte(`{"d":{"e":"x/y"}}`),
	}
	tests := map[string]string{
		"header:A+header:B":                  "1/two",
		"header:B+header:A":                  "two/1",
		"header:A+query:c+json:/d/e":         "1/3/x/y",
		"header:A+header:Missing":            "<nothing>",
		"header:Missing+header:A":            "<nothing>",
		"header:A+header:Empty":              "<nothing>",
		"header:A+json:/d":                   "<nothing>", // an object is not a value
		"header:A+header:A+header:A+query:c": "1/1/1/3",
	}
	for expr, want := range tests {
		if got := evalExpr(t, expr, r); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}
}

func TestPointerEscapes(t *testing.T) {
	r := &Request{Body: []byte(`{"a/b":{"m~n":"slash-tilde"},"~1":"literal","a":{"b":"nested"},"":"empty-key","a b":"space"}`)}
	tests := map[string]string{
		"json:/a~1b/m~0n": "slash-tilde",
		"json:/~01":       "literal", // ~0 first gives "~1", which is not unescaped again
		"json:/a/b":       "nested",
		"json:/":          "empty-key",
		"json:/a~1b/m~n":  "", // parse error, checked below
	}
	for expr, want := range tests {
		if want == "" {
			if _, err := ParseExpr(expr); err == nil {
				t.Errorf("%s: want parse error", expr)
			}
			continue
		}
		if got := evalExpr(t, expr, r); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}
}

func TestPointerArrays(t *testing.T) {
	r := &Request{Body: []byte(` { "a" : [ 10 , "x" , { "b" : true } , [ "deep" ] ] , "0" : { "1" : "obj" } } `)}
	tests := map[string]string{
		"json:/a/0":   "10",
		"json:/a/1":   "x",
		"json:/a/2/b": "true",
		"json:/a/3/0": "deep",
		"json:/a/4":   "<nothing>", // past the end
		"json:/a/-":   "<nothing>", // RFC 6901: the element after the last
		"json:/a/01":  "<nothing>", // leading zero is not an index
		"json:/a/-1":  "<nothing>",
		"json:/a/x":   "<nothing>",
		"json:/a/":    "<nothing>",
		"json:/0/1":   "obj", // digits are plain member names on objects
		"json:/a/0/0": "<nothing>",
	}
	for expr, want := range tests {
		if got := evalExpr(t, expr, r); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}
	empty := &Request{Body: []byte(`{"a":[]}`)}
	if got := evalExpr(t, "json:/a/0", empty); got != "<nothing>" {
		t.Errorf("json:/a/0 on an empty array = %q", got)
	}
}

func TestPointerValueKinds(t *testing.T) {
	body := `{
		"str": "evt_1", "esc": "caf\u00e9 \"q\" \\ \/", "utf8": "café", "empty": "",
		"int": 12345, "big": 123456789012345678901234567890, "neg": -0.25, "exp": 1.5E+3,
		"t": true, "f": false, "null": null, "obj": {"id": 1}, "arr": [1],
		"dup": "first", "dup": "last"
	}`
	r := &Request{Body: []byte(body)}
	tests := map[string]string{
		"json:/str":   "evt_1",
		"json:/esc":   `café "q" \ /`,
		"json:/utf8":  "café",
		"json:/empty": "<nothing>",
		"json:/int":   "12345",
		"json:/big":   "123456789012345678901234567890", // literal text, no float rounding
		"json:/neg":   "-0.25",
		"json:/exp":   "1.5E+3",
		"json:/t":     "true",
		"json:/f":     "false",
		"json:/null":  "<nothing>",
		"json:/obj":   "<nothing>",
		"json:/arr":   "<nothing>",
		"json:/nope":  "<nothing>",
		"json:/str/x": "<nothing>", // descending into a scalar
		"json:/dup":   "last",      // as encoding/json decodes it
	}
	for expr, want := range tests {
		if got := evalExpr(t, expr, r); got != want {
			t.Errorf("%s = %q, want %q", expr, got, want)
		}
	}
	// A scalar top-level document has no members.
	if got := evalExpr(t, "json:/id", &Request{Body: []byte(`"evt_1"`)}); got != "<nothing>" {
		t.Errorf("json:/id on a string document = %q", got)
	}
}

func TestPointerNonJSONBody(t *testing.T) {
	for _, body := range []string{
		"",
		"id=evt_1&type=x", // a form post
		"not json",
		`{"id":"evt_1"`,           // truncated
		`{"id":"evt_1"} trailing`, // valid prefix, garbage after
		`{"id":"evt_1"}{"id":"evt_2"}`,
		`{"id":"evt_1",}`,
		`{'id':'evt_1'}`,
		"\xff\xfe{\"id\":\"evt_1\"}",
	} {
		r := &Request{Body: []byte(body)}
		if got := evalExpr(t, "json:/id", r); got != "<nothing>" {
			t.Errorf("json:/id on body %q = %q, want nothing", body, got)
		}
	}
}

// identifyRequests are realistic deliveries of each provider, trimmed to the fields that matter.
var identifyRequests = map[string]struct {
	req      *Request
	id, kind string
}{
	"stripe": {
		req: &Request{
			Header: identifyHeaders("Stripe-Signature", "t=1700000000,v1=abc", "Content-Type", "application/json"),
			Body: []byte(`{"id":"evt_1OaBcDeFgHiJkLmN","object":"event","api_version":"2024-06-20","created":1700000000,` +
				`"data":{"object":{"id":"in_1Oa","object":"invoice","amount_paid":2000,"currency":"usd","lines":{"data":[{"id":"il_1","amount":2000}]}}},` +
				`"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"invoice.paid"}`),
		},
		id: "evt_1OaBcDeFgHiJkLmN", kind: "invoice.paid",
	},
	"github": {
		req: &Request{
			Header: identifyHeaders("X-GitHub-Hook-ID", "292430182", "X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958",
				"X-GitHub-Event", "push", "X-Hub-Signature-256", "sha256=abc"),
			Body: []byte(`{"ref":"refs/heads/main","before":"6113728f","after":"59b20b8d","repository":{"id":186853002,"full_name":"octo/hello"}}`),
		},
		id: "292430182/72d3162e-cc78-11e3-81ab-4c9367dc0958", kind: "push",
	},
	"shopify": {
		req: &Request{
			Header: identifyHeaders("X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", "X-Shopify-Topic", "orders/create",
				"X-Shopify-Shop-Domain", "shop.myshopify.com", "X-Shopify-Hmac-Sha256", "abc="),
			Body: []byte(`{"id":820982911946154508,"email":"jon@example.com","total_price":"199.65"}`),
		},
		id: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043", kind: "orders/create",
	},
	"slack": {
		req: &Request{
			Header: identifyHeaders("X-Slack-Signature", "v0=abc", "X-Slack-Request-Timestamp", "1700000000"),
			Body: []byte(`{"token":"XXYYZZ","team_id":"T123ABC456","api_app_id":"A123ABC456","event":{"type":"app_mention",` +
				`"user":"U123ABC456","text":"<@U0LAN0Z89> hi","ts":"1515449522.000016","channel":"C123ABC456"},` +
				`"type":"event_callback","event_id":"Ev123ABC456","event_time":1515449522}`),
		},
		id: "Ev123ABC456", kind: "app_mention",
	},
	"standard-webhooks": {
		req: &Request{
			Header: identifyHeaders("webhook-id", "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "webhook-timestamp", "1700000000", "webhook-signature", "v1,abc="),
			Body:   []byte(`{"type":"user.created","timestamp":"2022-11-03T20:26:10.344522Z","data":{"id":"1f81eb52","name":"Alice"}}`),
		},
		id: "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", kind: "user.created",
	},
}

func TestIdentifyDefaultsPerScheme(t *testing.T) {
	for scheme, tt := range identifyRequests {
		t.Run(scheme, func(t *testing.T) {
			idExpr := mustParseExpr(t, DefaultEventIDExpr(scheme))
			typeExpr := mustParseExpr(t, DefaultEventTypeExpr(scheme))
			r := *tt.req // a fresh Request: its body state starts unchecked
			if got := EventID(idExpr, &r); got != tt.id {
				t.Errorf("event ID = %q, want %q", got, tt.id)
			}
			if got, _ := typeExpr.Eval(&r); got != tt.kind {
				t.Errorf("event type = %q, want %q", got, tt.kind)
			}
		})
	}
}

func TestIdentifyDefaultsText(t *testing.T) {
	// The SPEC section 2 defaults, verbatim: users read them back through the admin API.
	want := map[string][2]string{
		"stripe":            {"json:/id", "json:/type"},
		"github":            {"header:X-GitHub-Hook-ID+header:X-GitHub-Delivery", "header:X-GitHub-Event"},
		"shopify":           {"header:X-Shopify-Webhook-Id", "header:X-Shopify-Topic"},
		"slack":             {"json:/event_id", "json:/event/type"},
		"standard-webhooks": {"header:webhook-id", "json:/type"},
		"hmac":              {"", ""},
		"none":              {"", ""},
		"Stripe":            {"", ""},
		"unknown":           {"", ""},
	}
	for scheme, w := range want {
		if got := DefaultEventIDExpr(scheme); got != w[0] {
			t.Errorf("DefaultEventIDExpr(%q) = %q, want %q", scheme, got, w[0])
		}
		if got := DefaultEventTypeExpr(scheme); got != w[1] {
			t.Errorf("DefaultEventTypeExpr(%q) = %q, want %q", scheme, got, w[1])
		}
	}
}

func TestIdentifyStandardWebhooksSvixID(t *testing.T) {
	e := mustParseExpr(t, DefaultEventIDExpr("standard-webhooks"))
	body := []byte(`{"type":"user.created"}`)
	svix := &Request{Header: identifyHeaders("svix-id", "msg_svix", "svix-signature", "v1,abc="), Body: body}
	if got := EventID(e, svix); got != "msg_svix" {
		t.Errorf("svix-id only: event ID = %q, want msg_svix", got)
	}
	both := &Request{Header: identifyHeaders("webhook-id", "msg_std", "svix-id", "msg_svix"), Body: body}
	if got := EventID(e, both); got != "msg_std" {
		t.Errorf("both headers: event ID = %q, want webhook-id's msg_std", got)
	}
	if got := EventID(mustParseExpr(t, "header:Webhook-ID"), svix); got != "msg_svix" {
		t.Errorf("header:Webhook-ID does not fall back to svix-id: %q", got)
	}
	if got := EventID(mustParseExpr(t, "header:X-Id"), svix); got == "msg_svix" {
		t.Error("an unrelated header fell back to svix-id")
	}
}

func TestEventIDFallbacks(t *testing.T) {
	body := []byte(`{"object":"event","type":"invoice.paid"}`)
	sum := sha256.Sum256(body)
	bodyHash := hex.EncodeToString(sum[:])
	emptySum := sha256.Sum256(nil)

	tests := []struct {
		name string
		expr string
		req  *Request
		want string
	}{
		{"expression wins", "json:/type", &Request{Header: identifyHeaders("Idempotency-Key", "ik-1"), Body: body}, "invoice.paid"},
		{"idempotency key", "json:/id", &Request{Header: identifyHeaders("Idempotency-Key", "ik-1"), Body: body}, "ik-1"},
		{"idempotency key, any case", "json:/id", &Request{Header: identifyHeaders("idempotency-key", "ik-2"), Body: body}, "ik-2"},
		{"body hash", "json:/id", &Request{Header: identifyHeaders("X-Other", "1"), Body: body}, bodyHash},
		{"body hash, empty key", "json:/id", &Request{Header: identifyHeaders("Idempotency-Key", ""), Body: body}, bodyHash},
		{"partial composite", "json:/type+header:X-Missing", &Request{Body: body}, bodyHash},
		{"zero expression", "", &Request{Header: identifyHeaders("Idempotency-Key", "ik-3"), Body: body}, "ik-3"},
		{"no headers", "", &Request{Body: body}, bodyHash},
		{"empty body", "", &Request{}, hex.EncodeToString(emptySum[:])},
		{"nil request", "json:/id", nil, hex.EncodeToString(emptySum[:])},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EventID(mustParseExpr(t, tt.expr), tt.req); got != tt.want {
				t.Errorf("EventID = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIdentifyBodyReadOnce(t *testing.T) {
	// The ingest path evaluates the ID and the type of every request. Walking the body in place
	// costs the two result strings whatever the body holds; a decode into map[string]any would cost
	// allocations per member (thousands here), which this test catches. The race detector adds an
	// allocation or two of its own, hence the small constant slack.
	small := `{"id":"evt_1","type":"invoice.paid"}`
	large := `{"id":"evt_1","pad":[` + strings.Repeat(`{"k":"v","n":[1,2,3]},`, 2000) + `{}],"type":"invoice.paid"}`
	idExpr, typeExpr := mustParseExpr(t, "json:/id"), mustParseExpr(t, "json:/type")
	allocs := func(body []byte) float64 {
		return testing.AllocsPerRun(20, func() {
			r := Request{Body: body}
			if EventID(idExpr, &r) != "evt_1" {
				t.Fatal("wrong event ID")
			}
			if v, _ := typeExpr.Eval(&r); v != "invoice.paid" {
				t.Fatal("wrong event type")
			}
		})
	}
	if s, l := allocs([]byte(small)), allocs([]byte(large)); s > 4 || l > s+2 {
		t.Errorf("allocations per request: %v on %d bytes, %v on %d bytes; want a few, independent of the body",
			s, len(small), l, len(large))
	}
}
