package gateway

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Webhooks posted as multipart/form-data (SendGrid Inbound Parse, Mailgun
// routes, many form-based senders) are bodies like any other: SPEC section
// 3 says the raw body is stored and forwarded byte for byte, and a
// signature is checked over those bytes. fasthttp, by default, parsed a
// multipart body of known length into a form before the handler ran, and
// Request.Body() then returned the form marshalled again: parts in map
// order (random), part headers other than Content-Disposition dropped.

const multipartBoundary = "hookgate-boundary"

// multipartBody is a multipart/form-data body with several fields, one of
// them with a part Content-Type, as senders write them.
func multipartBody() []byte {
	var b strings.Builder
	fields := []struct{ name, ctype, value string }{
		{"headers", "", "Received: by mx.example.com"},
		{"envelope", "application/json", `{"to":["hooks@example.com"],"from":"a@example.org"}`},
		{"subject", "", "Invoice 42"},
		{"text", "text/plain; charset=utf-8", "Hello,\r\nyour invoice."},
		{"from", "", "Alice <a@example.org>"},
		{"to", "", "hooks@example.com"},
		{"spam_score", "", "0.1"},
		{"charsets", "", `{"to":"UTF-8","subject":"UTF-8"}`},
	}
	for _, f := range fields {
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q\r\n", multipartBoundary, f.name)
		if f.ctype != "" {
			fmt.Fprintf(&b, "Content-Type: %s\r\n", f.ctype)
		}
		fmt.Fprintf(&b, "\r\n%s\r\n", f.value)
	}
	fmt.Fprintf(&b, "--%s--\r\n", multipartBoundary)
	return []byte(b.String())
}

func postMultipart(t *testing.T, g *gw, source string, body []byte, hdr map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+g.PublicAddr()+"/ingest/"+source, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "multipart/form-data; boundary="+multipartBoundary)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	st, _, b := do(t, req)
	return st, b
}

// TestMultipartBodyIsStoredByteForByte: a multipart/form-data webhook is
// stored with the exact bytes that were sent.
func TestMultipartBodyIsStoredByteForByte(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := multipartBody()
	st, b := postMultipart(t, g, "open", body, map[string]string{"Idempotency-Key": "mp-1"})
	if st != 202 {
		t.Fatalf("multipart webhook: %d %s, want 202", st, b)
	}
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	ev, err := g.Store().GetEvent(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ev.Body, body) {
		t.Fatalf("multipart body not stored byte for byte:\nsent   %q\nstored %q", body, ev.Body)
	}
}

// TestMislabelledMultipartBodyIsStored: a body whose Content-Type says
// multipart/form-data but that is not well-formed multipart (here, the
// closing boundary is missing, as some senders write it) is still a
// webhook: stored byte for byte like any other body, not refused with
// 400 by a form parser the gateway never asked for.
func TestMislabelledMultipartBodyIsStored(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := multipartBody()
	body = body[:bytes.LastIndex(body, []byte("--"+multipartBoundary+"--"))]
	st, b := postMultipart(t, g, "open", body, map[string]string{"Idempotency-Key": "mp-sloppy"})
	if st != 202 {
		t.Fatalf("multipart body without its closing boundary: %d %s, want 202", st, b)
	}
	id := must[jsonMap](t, 202)(st, nil, b)["id"].(string)
	if ev, err := g.Store().GetEvent(context.Background(), id); err != nil || !bytes.Equal(ev.Body, body) {
		t.Fatalf("stored %q, %v; want the body sent", ev.Body, err)
	}
}

// TestSignedMultipartWebhookIsAccepted: an HMAC over the raw multipart
// body, as the sender computed it, verifies.
func TestSignedMultipartWebhookIsAccepted(t *testing.T) {
	const key = "multipart-hmac-key"
	g := startGateway(t, gwOptions{extra: "  - id: forms\n    tenant: acme\n    verify: {scheme: hmac, secrets: [" + key + "], header: X-Signature}\n"})
	body := multipartBody()
	st, b := postMultipart(t, g, "forms", body, map[string]string{"X-Signature": hmacHex(key, body)})
	if st != 202 {
		t.Fatalf("multipart webhook signed over its raw body: %d %s, want 202", st, b)
	}
}

// TestResentMultipartWebhookIsOneEvent: a provider resending the same
// multipart webhook (it saw no answer) gets the first answer back: one
// event, one set of deliveries. The source has no event id in the body, so
// the id falls back to the SHA-256 of the body (SPEC section 2).
func TestResentMultipartWebhookIsOneEvent(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := multipartBody()
	var first []byte
	for i := range 10 {
		st, b := postMultipart(t, g, "open", body, nil)
		if st != 202 {
			t.Fatalf("send %d: %d %s", i+1, st, b)
		}
		if first == nil {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Fatalf("send %d of the same multipart webhook: answered %s, the first was %s: a second event", i+1, b, first)
		}
	}
	if evs := eventsIn(t, g.Store()); len(evs) != 1 {
		t.Fatalf("the same multipart webhook sent 10 times: %d events stored, want 1", len(evs))
	}
}

// TestResentMultipartWebhookWithIDIsReplayed: with the provider's event id
// in a header, a resend of the same body is a replay (same answer), never
// a 422 idempotency-key-reused.
func TestResentMultipartWebhookWithIDIsReplayed(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := multipartBody()
	var first []byte
	for i := range 10 {
		st, b := postMultipart(t, g, "open", body, map[string]string{"Idempotency-Key": "mp-resend"})
		if st != 202 {
			t.Fatalf("send %d of the same body with the same event id: %d %s, want 202 (replayed)", i+1, st, b)
		}
		if first == nil {
			first = b
		}
	}
}

func hmacHex(key string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}
