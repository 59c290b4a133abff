package inbound

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchBody pads a realistic JSON object body to about 1 KiB with a metadata member placed before
// the provider's own members, so that lookups walk past it.
func benchBody(body []byte) []byte {
	var pad strings.Builder
	pad.WriteString(`{"metadata":{`)
	for i := 0; pad.Len()+len(body) < 1024-32; i++ {
		fmt.Fprintf(&pad, `"key_%02d":"value %02d with some text",`, i, i)
	}
	pad.WriteString(`"n":[1,2.5,-3e2,true,null]},`)
	return append([]byte(pad.String()), body[1:]...)
}

func BenchmarkEventID(b *testing.B) {
	for _, scheme := range []string{"stripe", "github", "shopify", "slack", "standard-webhooks", "hmac"} {
		b.Run(scheme, func(b *testing.B) {
			tt, ok := identifyRequests[scheme]
			if !ok {
				tt = identifyRequests["stripe"] // hmac: no default, EventID hashes the body
			}
			body := benchBody(tt.req.Body)
			if !json.Valid(body) || len(body) < 1000 || len(body) > 1100 {
				b.Fatalf("bench body: valid %v, %d bytes", json.Valid(body), len(body))
			}
			idExpr := mustParseExpr(b, DefaultEventIDExpr(scheme))
			typeExpr := mustParseExpr(b, DefaultEventTypeExpr(scheme))
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				r := Request{Header: tt.req.Header, Body: body}
				if EventID(idExpr, &r) == "" {
					b.Fatal("empty event ID")
				}
				typeExpr.Eval(&r)
			}
		})
	}
}

// BenchmarkEventIDDecodeAny measures the alternative that Request does not use: decode the body
// once into map[string]any (json.Number for numbers) and walk the decoded values for the ID and the
// type. Compare with BenchmarkEventID/stripe.
func BenchmarkEventIDDecodeAny(b *testing.B) {
	body := benchBody(identifyRequests["stripe"].req.Body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		d := json.NewDecoder(bytes.NewReader(body))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			b.Fatal(err)
		}
		if id, _ := walkDecoded(v, []string{"id"}); id == "" {
			b.Fatal("empty event ID")
		}
		walkDecoded(v, []string{"type"})
	}
}
