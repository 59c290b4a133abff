package inbound

import (
	"encoding/json"
	"strings"
	"testing"
)

// A JSON string whose raw text holds a non-ASCII UTF-8 character before an escape sequence must
// be decoded like encoding/json does. Go's encoding/json writes "&" as \u0026 and keeps UTF-8 as
// is; PHP's json_encode writes "/" as "\/" and, with JSON_UNESCAPED_UNICODE, keeps UTF-8.
func TestPointerDecodesEscapesAfterNonASCII(t *testing.T) {
	for _, tc := range []struct{ body, expr string }{
		{`{"type":"café\u0026bar.created"}`, "json:/type"},
		{`{"id":"évt\/123"}`, "json:/id"},
		{`{"event":{"type":"müller\"quoted"}}`, "json:/event/type"},
	} {
		var want map[string]any
		if err := json.Unmarshal([]byte(tc.body), &want); err != nil {
			t.Fatal(err)
		}
		got, ok := mustParseExpr(t, tc.expr).Eval(&Request{Body: []byte(tc.body)})
		ref, _ := referencePointer([]byte(tc.body), mustParseExpr(t, tc.expr).parts[0].ptr)
		if !ok || got != ref {
			t.Errorf("%s on %s = %q, %v; encoding/json decodes %q", tc.expr, tc.body, got, ok, ref)
		}
	}
}

// The same early return decides whether a member name needs decoding: a name spelled with a
// non-ASCII character and then an escape is not found.
func TestPointerFindsMemberNamesWithEscapesAfterNonASCII(t *testing.T) {
	body := []byte(`{"ñ\u0061me":"v1"}`) // the member is "ñame"
	got, ok := mustParseExpr(t, "json:/ñame").Eval(&Request{Body: body})
	if !ok || got != "v1" {
		t.Errorf(`json:/ñame on %s = %q, %v; want "v1"`, body, got, ok)
	}
}

// jsonValue documented (and FuzzJSONPointer asserted) that gjson's validator "accepts exactly what
// encoding/json.Valid does". It does not past encoding/json's nesting limit of 10000: gjson
// validates recursively without a bound, so a hostile body of 1 MiB of "[" costs ~64 MB of
// goroutine stack and ~0.25 s per request, and a larger server.max_body can exhaust the 1 GB
// stack limit (a fatal, unrecoverable error). A body encoding/json calls invalid must yield nothing.
func TestDeepNestingIsNotJSON(t *testing.T) {
	const depth = 10001
	body := []byte(`{"id":"x","n":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}`)
	if json.Valid(body) {
		t.Fatal("encoding/json accepts the body; test premise wrong")
	}
	if v, ok := mustParseExpr(t, "json:/id").Eval(&Request{Body: body}); ok {
		t.Errorf("json:/id on a body nested %d deep (invalid for encoding/json) = %q; want nothing", depth, v)
	}
}
