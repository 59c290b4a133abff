package gateway

import (
	"strings"
	"testing"
)

// Header lines a proxy in front may read otherwise than fasthttp does
// (RFC 9112 sections 3.2, 5.1, 5.2) are 400 problems, on both listeners,
// and nothing is stored: a bare CR or a NUL in a value, whitespace before
// the colon, a folded line, an empty name, Host or Content-Type twice
// or, in HTTP/1.1, Host not at all. fasthttp took each of them, and stored the event.
func TestAmbiguousHeaderLinesAreRefused(t *testing.T) {
	g := startGateway(t, gwOptions{})
	body := `{"id":"strict","type":"a"}`
	post := func(version, head string) string {
		return "POST /ingest/open " + version + "\r\n" + head + "Content-Type: application/json\r\nContent-Length: " +
			itoa(len(body)) + "\r\n\r\n" + body
	}
	for _, c := range []struct{ name, raw string }{
		{"bare CR in a value", post("HTTP/1.1", "Host: x\r\nX-A: a\rb\r\n")},
		{"NUL in a value", post("HTTP/1.1", "Host: x\r\nX-A: a\x00b\r\n")},
		{"space before the colon", post("HTTP/1.1", "Host: x\r\nX-Signature : v\r\n")},
		{"folded line", post("HTTP/1.1", "Host: x\r\nX-A: a\r\n b\r\n")},
		{"empty name", post("HTTP/1.1", "Host: x\r\n: v\r\n")},
		{"Host twice", post("HTTP/1.1", "Host: x\r\nHost: y\r\n")},
		{"no Host in HTTP/1.1", post("HTTP/1.1", "")},
		// fasthttp keeps the last: the event was stored and delivered with
		// a type a proxy in front did not see.
		{"Content-Type twice", post("HTTP/1.1", "Host: x\r\nContent-Type: text/plain\r\n")},
	} {
		for _, addr := range []string{g.PublicAddr(), g.AdminAddr()} {
			raw := c.raw
			if addr == g.AdminAddr() {
				raw = strings.Replace(raw, "/ingest/open", "/api/v1/events", 1)
			}
			a := rawExchange(t, addr, raw)
			if a.status != 400 || !strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") {
				t.Errorf("%s (%s): %d %q %s, want a 400 problem", c.name, addr, a.status, a.header.Get("Content-Type"), a.body)
			}
		}
	}
	wantNoEvents(t, g, "after ambiguous header lines")
	// HTTP/1.0 may leave Host out.
	if a := rawExchange(t, g.PublicAddr(), post("HTTP/1.0", "")); a.status != 202 {
		t.Fatalf("HTTP/1.0 without Host: %d %s", a.status, a.body)
	}
}
