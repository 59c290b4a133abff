package inbound

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func FuzzParseExpr(f *testing.F) {
	for _, scheme := range []string{"stripe", "github", "shopify", "slack", "standard-webhooks"} {
		f.Add(DefaultEventIDExpr(scheme))
		f.Add(DefaultEventTypeExpr(scheme))
	}
	for _, s := range []string{"", "json:/a~1b/m~0n/0", "json:", "json:/a~2", "header:", "header:A++header:B",
		"query:x+json:/y+header:Webhook-Id", "Header:X", "json:/+", strings.Repeat("query:q+", 9)} {
		f.Add(s)
	}
	r := &Request{
		Header: identifyHeaders("X-Id", "1", "webhook-id", "msg_1"),
		Query:  func(string) string { return "q" },
		Body:   []byte(`{"a/b":{"m~n":[1,"x"]},"id":"evt_1"}`),
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseExpr(s)
		if err != nil {
			if !errors.Is(err, ErrBadExpr) || !e.IsZero() {
				t.Fatalf("ParseExpr(%q): error %v (wraps ErrBadExpr: %v), Expr %q", s, err, errors.Is(err, ErrBadExpr), e)
			}
			return
		}
		if len(s) > MaxExprLen || len(e.parts) > MaxExprParts {
			t.Fatalf("ParseExpr(%q) accepted %d bytes, %d parts", s, len(s), len(e.parts))
		}
		if e.String() != s {
			t.Fatalf("ParseExpr(%q).String() = %q", s, e.String())
		}
		e2, err := ParseExpr(e.String())
		if err != nil || !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip of %q: %v, %#v != %#v", s, err, e2, e)
		}
		req := *r
		if v, ok := e.Eval(&req); ok == (v == "") {
			t.Fatalf("%q: Eval = %q, %v", s, v, ok)
		}
		if EventID(e, &req) == "" {
			t.Fatalf("%q: empty EventID", s)
		}
	})
}

func FuzzJSONPointer(f *testing.F) {
	for _, body := range []string{
		identifyRequestBody("stripe"), identifyRequestBody("slack"),
		`{"a/b":{"m~n":"x"},"~1":"y","":"z"}`,
		` [ 0 , [ "a" , { "b" : -1.5e+10 } ] , true , null ] `,
		`{"dup":1,"dup":"two","s":"\u00e9\ud83d\ude00\ud800\"\\\/\b\f\n\r\t"}`,
		"{\"bad\xffutf8\":\"v\xfe\"}",
		`{"id":"x"} trailing`, `{"id":`, `"top"`, `12`, ``,
		"\"\x13\"", `01`, `-0.0e-0`, `1.`, `[1,]`, `{"a":1,}`, `"\x"`, `"\u12"`, `nul`, "\t\r\n{}\f",
		`{"type":"café\u0026bar","ñ\u0061me":"évt\/1"}`,
		`{"id":"x","n":` + strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1) + `}`,
		`{"id":"x","n":` + strings.Repeat("[", maxJSONDepth-1) + strings.Repeat("]", maxJSONDepth-1) + `}`,
	} {
		for _, ptr := range []string{"", "/", "/id", "/type", "/event/type", "/a~1b/m~0n", "/~01", "/1/1/b", "/0", "/dup", "/s", "/bad\ufffdutf8", "/-", "/01"} {
			f.Add([]byte(body), ptr)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, ptr string) {
		toks, err := parsePointer(ptr)
		if err != nil {
			return
		}
		if valid := !tooDeep(body) && gjson.ValidBytes(body); valid != json.Valid(body) {
			t.Fatalf("body %q: tooDeep and gjson say valid %v, encoding/json %v", body, valid, json.Valid(body))
		}
		r := &Request{Body: body}
		got, gotOK := r.jsonValue(toks)
		want, wantOK := referencePointer(body, toks)
		if got != want || gotOK != wantOK {
			t.Fatalf("body %q pointer %q: got %q, %v; encoding/json says %q, %v", body, ptr, got, gotOK, want, wantOK)
		}
		if e, err := ParseExpr("json:" + ptr); err == nil {
			v, ok := e.Eval(&Request{Body: body})
			if ok != (wantOK && want != "") || (ok && v != want) {
				t.Fatalf("body %q: %s = %q, %v; want %q", body, e, v, ok, want)
			}
		}
	})
}

// identifyRequestBody returns the body of a realistic request of the scheme, as a string.
func identifyRequestBody(scheme string) string { return string(identifyRequests[scheme].req.Body) }

// referencePointer is the slow, obviously right pointer lookup the fuzzer checks against: decode
// with encoding/json (numbers as json.Number), then walk the decoded values.
func referencePointer(body []byte, toks []string) (string, bool) {
	if !json.Valid(body) {
		return "", false
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return "", false
	}
	return walkDecoded(v, toks)
}

// rfc6901Index is an array index as RFC 6901 section 4 writes it.
var rfc6901Index = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// walkDecoded follows toks through a value decoded by encoding/json and renders the scalar found.
func walkDecoded(v any, toks []string) (string, bool) {
	for _, tok := range toks {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[tok]; !ok {
				return "", false
			}
		case []any:
			n, err := strconv.Atoi(tok)
			if !rfc6901Index.MatchString(tok) || err != nil || n >= len(c) {
				return "", false
			}
			v = c[n]
		default:
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return string(x), true
	case bool:
		return strconv.FormatBool(x), true
	}
	return "", false
}
